// jit_train_demo: the small multimodal data set generated on first run — JPEG images and short MP4 clips
// of coloured shapes, each with a same-stem .txt caption that describes it (so the caption embedding
// carries information about the latent). Deterministic from the seed.
#pragma once

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "jitembed/codec/jpeg.hpp"
#include "jitembed/codec/video_encode.hpp"
#include "jitembed/core/error.hpp"
#include "jitembed/core/tensor.hpp"

namespace jit_train_demo {

using namespace jitembed;

// splitmix64: a tiny deterministic generator (the same stream on every platform).
struct rng {
  std::uint64_t s;
  explicit rng(std::uint64_t seed) : s(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }  // [0, 1)
  int below(int n) { return static_cast<int>(next() % static_cast<std::uint64_t>(n)); }
  float normal() {  // Box-Muller
    const double u1 = uniform() + 1e-12, u2 = uniform();
    return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }
};

inline std::uint64_t mix(std::uint64_t a, std::uint64_t b) { return rng(a * 0x2545F4914F6CDD1Dull ^ b).next(); }

struct data_spec {
  int images = 256;
  int videos = 32;
  int image_size = 64;  // square; the image-latent bucket the demo asks for is 64 as well
  int video_size = 64;
  int video_frames = 8;
  std::uint64_t seed = 1;
};

namespace detail {

struct colour {
  const char* name;
  std::uint8_t r, g, b;
};
inline constexpr colour kColours[] = {{"red", 220, 40, 40},   {"green", 40, 180, 60},    {"blue", 40, 70, 220},
                                      {"yellow", 230, 210, 40}, {"purple", 150, 60, 190}, {"orange", 240, 140, 30},
                                      {"white", 240, 240, 240}, {"black", 20, 20, 20}};
inline constexpr const char* kShapes[] = {"circle", "square", "diamond", "ring"};
inline constexpr const char* kSizes[] = {"small", "medium", "large"};

struct scene {
  int fg, bg, shape, size;
  double cx, cy, dx, dy;  // centre (fraction of the side) and motion per frame (videos)
};

inline scene random_scene(rng& r) {
  scene s{};
  s.fg = r.below(8);
  do s.bg = r.below(8);
  while (s.bg == s.fg);
  s.shape = r.below(4);
  s.size = r.below(3);
  s.cx = 0.3 + 0.4 * r.uniform();
  s.cy = 0.3 + 0.4 * r.uniform();
  const int dir = r.below(4);
  const double step = 0.03;
  s.dx = dir == 0 ? step : dir == 1 ? -step : 0;
  s.dy = dir == 2 ? step : dir == 3 ? -step : 0;
  return s;
}

inline const char* direction(const scene& s) {
  if (s.dx > 0) return "right";
  if (s.dx < 0) return "left";
  if (s.dy > 0) return "down";
  return "up";
}

// Draws the scene at time `t` (frames) into an [n, n, 3] RGB buffer, with a soft background gradient.
inline void draw(const scene& s, int t, int n, std::uint8_t* px) {
  const auto& fg = kColours[s.fg];
  const auto& bg = kColours[s.bg];
  const double radius = (0.12 + 0.08 * s.size) * n;
  const double cx = (s.cx + s.dx * t) * n, cy = (s.cy + s.dy * t) * n;
  for (int y = 0; y < n; ++y) {
    for (int x = 0; x < n; ++x) {
      const double shade = 0.75 + 0.25 * (static_cast<double>(x + y) / (2.0 * n));
      const double ux = x + 0.5 - cx, uy = y + 0.5 - cy;
      bool in = false;
      switch (s.shape) {
        case 0: in = ux * ux + uy * uy <= radius * radius; break;
        case 1: in = std::abs(ux) <= radius && std::abs(uy) <= radius; break;
        case 2: in = std::abs(ux) + std::abs(uy) <= radius * 1.3; break;
        default: {
          const double d = std::sqrt(ux * ux + uy * uy);
          in = d <= radius && d >= radius * 0.55;
        }
      }
      std::uint8_t* p = px + (static_cast<std::size_t>(y) * n + x) * 3;
      if (in) {
        p[0] = fg.r, p[1] = fg.g, p[2] = fg.b;
      } else {
        p[0] = static_cast<std::uint8_t>(bg.r * shade), p[1] = static_cast<std::uint8_t>(bg.g * shade),
        p[2] = static_cast<std::uint8_t>(bg.b * shade);
      }
    }
  }
}

inline result<void> write_file(const std::filesystem::path& p, const void* data, std::size_t n) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
  f.close();
  if (!f) return fail(errc::io_error, "cannot write '" + p.string() + "'");
  return {};
}

inline result<void> write_text(const std::filesystem::path& p, const std::string& s) { return write_file(p, s.data(), s.size()); }

}  // namespace detail

// A marker file records what was generated, so a second run with the same spec reuses the files.
inline std::string spec_string(const data_spec& d) {
  return "jit_train_demo data v1 images=" + std::to_string(d.images) + " videos=" + std::to_string(d.videos) +
         " image_size=" + std::to_string(d.image_size) + " video_size=" + std::to_string(d.video_size) +
         " video_frames=" + std::to_string(d.video_frames) + " seed=" + std::to_string(d.seed) + "\n";
}

// Writes images/iNNNNN.{jpg,txt} and videos/vNNNNN.{mp4,txt} under dir unless dir already holds this
// spec's data. Returns true when it generated the files.
inline result<bool> ensure_data(const std::filesystem::path& dir, const data_spec& d) {
  namespace fs = std::filesystem;
  const fs::path marker = dir / "DATASET";
  {
    std::ifstream m(marker);
    std::string line;
    if (m && std::getline(m, line) && line + "\n" == spec_string(d)) return false;
  }
  std::error_code ec;
  fs::create_directories(dir / "images", ec);
  fs::create_directories(dir / "videos", ec);
  if (ec) return fail(errc::io_error, "cannot create '" + dir.string() + "': " + ec.message());
  rng r(mix(d.seed, 0x696d616765));
  const int n = d.image_size;
  tensor img = tensor::zeros(shape{n, n, 3}, dtype::u8);
  for (int i = 0; i < d.images; ++i) {
    const auto s = detail::random_scene(r);
    detail::draw(s, 0, n, img.data<std::uint8_t>());
    auto jpeg = codec::encode_jpeg(img, {.quality = 90});
    if (!jpeg) return jpeg.error();
    char stem[32];
    std::snprintf(stem, sizeof stem, "i%05d", i);
    JITEMBED_TRY(detail::write_file(dir / "images" / (std::string(stem) + ".jpg"), jpeg->data(), jpeg->size()));
    JITEMBED_TRY(detail::write_text(dir / "images" / (std::string(stem) + ".txt"),
                                    std::string("a ") + detail::kSizes[s.size] + " " + detail::kColours[s.fg].name + " " +
                                        detail::kShapes[s.shape] + " on a " + detail::kColours[s.bg].name + " background"));
  }
  rng rv(mix(d.seed, 0x766964656f));
  const int vn = d.video_size, T = d.video_frames;
  tensor clip = tensor::zeros(shape{T, vn, vn, 3}, dtype::u8);
  for (int i = 0; i < d.videos; ++i) {
    const auto s = detail::random_scene(rv);
    for (int t = 0; t < T; ++t) detail::draw(s, t, vn, clip.data<std::uint8_t>() + static_cast<std::size_t>(t) * vn * vn * 3);
    auto mp4 = codec::encode_video(clip, {.fps = 8, .crf = 20, .preset = "veryfast"});
    if (!mp4) return mp4.error();
    char stem[32];
    std::snprintf(stem, sizeof stem, "v%05d", i);
    JITEMBED_TRY(detail::write_file(dir / "videos" / (std::string(stem) + ".mp4"), mp4->data(), mp4->size()));
    JITEMBED_TRY(detail::write_text(dir / "videos" / (std::string(stem) + ".txt"),
                                    std::string("a ") + detail::kSizes[s.size] + " " + detail::kColours[s.fg].name + " " +
                                        detail::kShapes[s.shape] + " moving " + detail::direction(s) + " over a " +
                                        detail::kColours[s.bg].name + " background"));
  }
  JITEMBED_TRY(detail::write_text(marker, spec_string(d)));
  return true;
}

}  // namespace jit_train_demo
