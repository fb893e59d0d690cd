// format_tour: encodes a multimodal sample (JPEG image, H.264/MP4 clip, caption, token ids, a bf16
// latent), writes a shard of such samples, reads it back zero-copy through mmap and prints a table.
// Usage: format_tour [OUT_DIR] [--image FILE.jpg] [--video FILE.mp4]
// Without --image / --video it renders a small landscape scene and a panning clip over it.
#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "jitembed/codec/jpeg.hpp"
#include "jitembed/codec/video.hpp"
#include "jitembed/format.hpp"

using namespace jitembed;
namespace fs = std::filesystem;

namespace {

// A landscape: sky gradient, sun, two ranges of hills, textured grass. Smooth and textured regions
// like a photograph, so JPEG and H.264 behave as they do on real data.
tensor render_scene(int h, int w, double shift) {
  tensor img = tensor::empty({h, w, 3}, dtype::u8);
  auto* p = img.data<std::uint8_t>();
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> grain(-9, 9);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      const double fx = (x + shift) / w, fy = static_cast<double>(y) / h;
      double r = 90 + 100 * fy, g = 150 + 60 * fy, b = 235 - 40 * fy;  // sky
      const double sun = std::hypot(fx - 0.75, fy - 0.22);
      if (sun < 0.07) r = 255, g = 230, b = 140;
      const double far = 0.55 + 0.08 * std::sin(fx * 9.0) + 0.03 * std::sin(fx * 31.0);
      const double near = 0.68 + 0.06 * std::sin(fx * 5.0 + 1.0) + 0.02 * std::sin(fx * 57.0);
      if (fy > far) r = 70, g = 95 + 30 * (fy - far), b = 120;
      if (fy > near) {
        const int n = grain(rng);
        r = 50 + n, g = 120 + 80 * (fy - near) + 2 * n, b = 40 + n;
      }
      auto* px = p + (static_cast<std::size_t>(y) * w + x) * 3;
      px[0] = static_cast<std::uint8_t>(std::clamp(r, 0.0, 255.0));
      px[1] = static_cast<std::uint8_t>(std::clamp(g, 0.0, 255.0));
      px[2] = static_cast<std::uint8_t>(std::clamp(b, 0.0, 255.0));
    }
  }
  return img;
}

tensor render_clip(int frames, int h, int w) {
  tensor clip = tensor::empty({frames, h, w, 3}, dtype::u8);
  const std::size_t frame_bytes = static_cast<std::size_t>(h) * w * 3;
  for (int t = 0; t < frames; ++t) {
    tensor f = render_scene(h, w, t * 6.0);  // the camera pans right
    std::memcpy(clip.data<std::uint8_t>() + t * frame_bytes, f.data(), frame_bytes);
  }
  return clip;
}

byte_buffer read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw error(errc::io_error, "cannot open " + p.string());
  byte_buffer b(fs::file_size(p));
  in.read(reinterpret_cast<char*>(b.data()), static_cast<std::streamsize>(b.size()));
  return b;
}

void write_file(const fs::path& p, bytes_view b) {
  std::ofstream out(p, std::ios::binary);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  if (!out) throw error(errc::io_error, "cannot write " + p.string());
}

bool points_into(bytes_view inner, bytes_view outer) {
  return inner.data() >= outer.data() && inner.data() + inner.size() <= outer.data() + outer.size();
}

}  // namespace

int main(int argc, char** argv) try {
  fs::path out_dir = "format_tour_out";
  fs::path image_path, video_path;
  CLI::App app{"format_tour: encode a multimodal sample, write a shard of them, read it back zero-copy"};
  app.add_option("OUT_DIR", out_dir, "output directory")->capture_default_str();
  app.add_option("--image", image_path, "a JPEG file to use (default: a rendered scene)")->check(CLI::ExistingFile);
  app.add_option("--video", video_path, "an MP4 / WebM / MKV file to use (default: a rendered clip)")->check(CLI::ExistingFile);
  CLI11_PARSE(app, argc, argv);
  fs::create_directories(out_dir);

  // 1. The media: real JPEG and H.264 bytes (from files when given, else rendered and encoded here).
  const byte_buffer jpeg = image_path.empty() ? codec::encode_jpeg(render_scene(480, 640, 0), {.quality = 90}).value()
                                              : read_file(image_path);
  const byte_buffer mp4 = video_path.empty() ? codec::encode_video(render_clip(24, 180, 320), {.fps = 24.0}).value()
                                             : read_file(video_path);
  const auto jinfo = codec::probe_jpeg(jpeg).value();
  const auto vinfo = codec::probe_video(mp4, decode_limits{}).value();
  write_file(out_dir / "image.jpg", jpeg);
  write_file(out_dir / "clip.mp4", mp4);
  std::printf("image: %dx%d JPEG, %zu bytes\n", jinfo.width, jinfo.height, jpeg.size());
  std::printf("clip:  %dx%d %s in %s, %lld frames at %.1f fps, %zu bytes\n", vinfo.width, vinfo.height,
              vinfo.codec.c_str(), vinfo.container.c_str(), static_cast<long long>(vinfo.frame_count), vinfo.fps,
              mp4.size());

  // 2. Text, token ids and a latent.
  const std::string caption =
      "A wide landscape at golden hour: a pale sun over two ranges of hills, the near slope covered in "
      "grass, the camera panning slowly to the right. Überall Gras — 草原.";
  tensor tokens = tensor::empty({77}, dtype::i32);
  for (int i = 0; i < 77; ++i) tokens.data<std::int32_t>()[i] = i < 40 ? 49406 + (i * 7919) % 1000 : 0;
  tensor latent = tensor::empty({4, 32, 32}, dtype::bf16);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (std::size_t i = 0; i < latent.numel(); ++i) latent.data<bfloat16>()[i] = bfloat16(normal(rng));

  // 3. One record, then a shard of eight (each with its own latent values).
  format::record_builder b;
  b.add_image("image", jpeg).value();
  b.add_video("clip", mp4).value();
  b.add_text("caption", caption).value();
  b.add_tensor("tokens", tokens, format::tensor_encoding::zstd(3, 4)).value();
  b.add_tensor("latent", latent).value();  // raw: 64-byte aligned, decodes zero-copy
  const byte_buffer record = b.finish().value();
  write_file(out_dir / "sample.jemr", record);

  const fs::path shard_path = out_dir / "samples.jems";
  {
    auto w = format::shard_writer::create(shard_path.string()).value();
    for (int i = 0; i < 8; ++i) {
      latent.data<bfloat16>()[0] = bfloat16(static_cast<float>(i));
      w.append(b, "sample-" + std::to_string(i)).value();
    }
    w.close().value();
  }
  std::printf("record: %zu bytes; shard: 8 records, %ju bytes -> %s\n\n", record.size(),
              static_cast<std::uintmax_t>(fs::file_size(shard_path)), shard_path.string().c_str());

  // 4. Read back through mmap: views point into the mapping; decode lazily, per field.
  const auto shard = format::shard_reader::open(shard_path.string()).value();
  const auto rec = shard.record(5).value();
  std::printf("%-9s %-7s %-6s %10s  %-22s %s\n", "field", "kind", "codec", "stored", "decoded", "zero-copy");
  const decode_limits limits;
  for (const auto& f : rec) {
    tensor t;
    switch (f.codec()) {
      case codec::codec_id::jpeg: t = f.decode_with(codec::jpeg_codec{}, limits).value(); break;
      case codec::codec_id::video: {
        codec::video_codec vc;
        vc.decode_options.num_frames = 8;
        t = f.decode_with(vc, limits).value();
        break;
      }
      default: t = f.decode(limits).value(); break;
    }
    const bool zero_copy = points_into(f.payload(), shard.bytes()) &&
                           points_into({static_cast<const std::byte*>(t.data()), t.nbytes()}, shard.bytes());
    const std::string decoded = std::string(to_string(t.dtype())) + t.shape().to_string();
    std::printf("%-9s %-7s %-6s %10zu  %-22s %s\n", std::string(f.name()).c_str(),
                std::string(format::to_string(f.kind())).c_str(), std::string(codec::to_string(f.codec())).c_str(),
                f.payload().size(), decoded.c_str(), zero_copy ? "yes" : "no (decoded)");
  }
  const std::string text = rec.find("caption")->text(limits).value();
  const tensor back = rec.find("latent")->decode(limits).value();
  std::printf("\ncaption round trip: %s\n", text == caption ? "exact" : "MISMATCH");
  std::printf("latent[0] of record 5 = %.1f (written as 5.0); latent points into the shard mapping: %s\n",
              static_cast<float>(back.data<bfloat16>()[0]),
              points_into(back.bytes(), shard.bytes()) ? "yes" : "no");
  std::printf("all payload checksums: %s\n", rec.verify() ? "ok" : "BAD");
  return text == caption && static_cast<float>(back.data<bfloat16>()[0]) == 5.0f ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "format_tour: %s\n", e.what());
  return 1;
}
