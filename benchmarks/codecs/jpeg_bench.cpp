// JPEG benchmarks: jitembed decode/encode against direct TurboJPEG calls on the same photograph-like
// images (side by side, one core), and batch decode on a 2-thread pool against a 1-thread pool.
#include <turbojpeg.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

#include "codecs/codec_benches.hpp"
#include "jitembed/codec/jpeg.hpp"

namespace jitembed::bench {
namespace {

// Photograph-like content: smooth illumination, a few soft-edged objects, fine texture and sensor noise.
tensor photo_like(int w, int h, std::uint32_t seed) {
  tensor t = tensor::empty({h, w, 3}, dtype::u8);
  auto* p = t.data<std::uint8_t>();
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  std::normal_distribution<double> noise(0, 3.0);
  struct blob {
    double cx, cy, r, col[3];
  };
  std::vector<blob> blobs(6);
  for (auto& b : blobs) b = {u(rng) * w, u(rng) * h, (0.1 + 0.3 * u(rng)) * w, {u(rng) * 255, u(rng) * 255, u(rng) * 255}};
  const double base[3] = {60 + 120 * u(rng), 60 + 120 * u(rng), 60 + 120 * u(rng)};
  const double fx = 0.02 + 0.2 * u(rng), fy = 0.02 + 0.2 * u(rng);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      double c[3];
      const double light = 0.7 + 0.3 * std::sin(x * 3.0 / w + seed) * std::cos(y * 2.0 / h);
      for (int k = 0; k < 3; ++k) c[k] = base[k] * light;
      for (const auto& b : blobs) {
        const double d = std::hypot(x - b.cx, y - b.cy) / b.r;
        const double a = std::clamp(1.5 - d * 1.5, 0.0, 1.0);  // soft edge
        for (int k = 0; k < 3; ++k) c[k] = c[k] * (1 - a) + b.col[k] * a;
      }
      const double tex = 12 * std::sin(x * fx + 0.5 * std::sin(y * fy)) * std::sin(y * fy);
      for (int k = 0; k < 3; ++k)
        p[(static_cast<std::size_t>(y) * w + x) * 3 + k] = static_cast<std::uint8_t>(std::clamp(c[k] + tex + noise(rng), 0.0, 255.0));
    }
  }
  return t;
}

struct corpus {
  std::vector<tensor> images;
  std::vector<byte_buffer> jpegs;
  std::vector<bytes_view> views;
  double megapixels = 0;
};

corpus make_corpus() {
  corpus c;
  for (int i = 0; i < 32; ++i) {
    const bool big = i % 2 == 1;
    c.images.push_back(photo_like(big ? 1024 : 512, big ? 768 : 512, 100 + static_cast<std::uint32_t>(i)));
    c.jpegs.push_back(codec::encode_jpeg(c.images.back(), {90, codec::chroma_subsampling::s420}).value());
    c.megapixels += big ? 1024.0 * 768 / 1e6 : 512.0 * 512 / 1e6;
  }
  for (const auto& j : c.jpegs) c.views.emplace_back(j.data(), j.size());
  return c;
}

// What a careful direct TurboJPEG user writes: one handle, header, allocate, decompress.
struct direct_decoder {
  tjhandle h = tjInitDecompress();
  ~direct_decoder() { tjDestroy(h); }
  std::size_t decode(bytes_view j) {
    int w = 0, ht = 0, samp = 0, cs = 0;
    const auto* src = reinterpret_cast<const unsigned char*>(j.data());
    if (tjDecompressHeader3(h, src, j.size(), &w, &ht, &samp, &cs) != 0) throw std::runtime_error(tjGetErrorStr2(h));
    const std::size_t n = static_cast<std::size_t>(w) * ht * 3;
    std::unique_ptr<unsigned char[]> out(new unsigned char[n]);
    if (tjDecompress2(h, src, j.size(), out.get(), w, 0, ht, TJPF_RGB, TJFLAG_STOPONWARNING | TJFLAG_LIMITSCANS) != 0)
      throw std::runtime_error(tjGetErrorStr2(h));
    return n + out[n / 2];
  }
};

}  // namespace

void run_jpeg_benchmarks(reporter& r) {
  const corpus c = make_corpus();
  const decode_limits limits{};
  const codec::jpeg_decode_options opts{};
  volatile std::size_t sink = 0;

  // 1. Decode on one core: jitembed vs direct tjDecompress2.
  direct_decoder direct;
  auto [t_ours, t_direct] = side_by_side(
      7,
      [&] {
        for (auto v : c.views) sink = sink + codec::decode_jpeg(v, opts, limits).value().nbytes();
      },
      [&] {
        for (auto v : c.views) sink = sink + direct.decode(v);
      });
  r.add("jpeg/decode_1core/jitembed", "mpix_per_s", c.megapixels / t_ours, "Mpx/s");
  r.add("jpeg/decode_1core/turbojpeg_direct", "mpix_per_s", c.megapixels / t_direct, "Mpx/s");
  r.add("jpeg/decode_1core/jitembed_vs_direct", "ratio", t_direct / t_ours, "x",
        {{"images", c.views.size()}, {"sizes", "512x512,1024x768"}, {"quality", 90}, {"subsampling", "4:2:0"}}, 0.95);

  // 2. Encode on one core: jitembed vs direct tjCompress2 (TurboJPEG-allocated output).
  tjhandle enc = tjInitCompress();
  auto [t_enc_ours, t_enc_direct] = side_by_side(
      3,
      [&] {
        for (const auto& img : c.images) sink = sink + codec::encode_jpeg(img, {90}).value().size();
      },
      [&] {
        for (const auto& img : c.images) {
          unsigned char* buf = nullptr;
          unsigned long size = 0;
          tjCompress2(enc, img.data<std::uint8_t>(), static_cast<int>(img.size(1)), 0, static_cast<int>(img.size(0)),
                      TJPF_RGB, &buf, &size, TJSAMP_420, 90, 0);
          sink = sink + size;
          tjFree(buf);
        }
      });
  tjDestroy(enc);
  r.add("jpeg/encode_1core/jitembed_vs_direct", "ratio", t_enc_direct / t_enc_ours, "x",
        {{"jitembed_mpix_per_s", c.megapixels / t_enc_ours}});

  // 3. DCT-scaled decode to 256x256 (+ exact resize) against a native-size decode.
  codec::jpeg_decode_options small = opts;
  small.target_width = 256;
  small.target_height = 256;
  auto [t_small, t_native] = side_by_side(
      5,
      [&] {
        for (auto v : c.views) sink = sink + codec::decode_jpeg(v, small, limits).value().nbytes();
      },
      [&] {
        for (auto v : c.views) sink = sink + codec::decode_jpeg(v, opts, limits).value().nbytes();
      });
  r.add("jpeg/decode_to_256x256/speedup_vs_native", "ratio", t_native / t_small, "x",
        {{"images_per_s", static_cast<double>(c.views.size()) / t_small}});

  // 4. Batch decode: a 2-thread pool against a 1-thread pool (same call, same images). decode_jpeg_batch
  //    returns fresh tensors (their first touch costs page faults, which scale less than decoding);
  //    decode_jpeg_batch_into writes into buffers reused from the previous step.
  thread_pool one(1), two(2);
  auto [t_two, t_one] = side_by_side(
      5,
      [&] {
        for (const auto& res : codec::decode_jpeg_batch(c.views, opts, limits, two)) sink = sink + res.value().nbytes();
      },
      [&] {
        for (const auto& res : codec::decode_jpeg_batch(c.views, opts, limits, one)) sink = sink + res.value().nbytes();
      });
  r.add("jpeg/decode_batch/2_threads_vs_1", "speedup", t_one / t_two, "x",
        {{"mpix_per_s_2_threads", c.megapixels / t_two}, {"hardware_threads", std::thread::hardware_concurrency()}}, 1.8);

  std::vector<tensor> bufs;
  std::vector<tensor_view> outs;
  for (const auto& img : c.images) bufs.push_back(tensor::zeros(img.shape(), dtype::u8));
  for (const auto& b : bufs) outs.push_back(b.view());
  auto [t_two_into, t_one_into] = side_by_side(
      5,
      [&] {
        for (const auto& res : codec::decode_jpeg_batch_into(c.views, outs, opts, limits, two)) res.value();
      },
      [&] {
        for (const auto& res : codec::decode_jpeg_batch_into(c.views, outs, opts, limits, one)) res.value();
      });
  r.add("jpeg/decode_batch_into/2_threads_vs_1", "speedup", t_one_into / t_two_into, "x",
        {{"mpix_per_s_2_threads", c.megapixels / t_two_into}, {"mpix_per_s_1_thread", c.megapixels / t_one_into}});
}

}  // namespace jitembed::bench
