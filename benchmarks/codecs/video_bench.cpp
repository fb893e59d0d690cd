// Video decode throughput: decode_video of every frame of a 640x360, 10 s, 24 fps H.264 clip to RGB at
// native size, against the ffmpeg CLI decoding the same file (`-f null`, and `-pix_fmt rgb24 -f null`),
// same decoder thread count, side by side; and decode_video_into of every frame into one reused staging
// buffer against `-f null`. Ratio = ffmpeg seconds / jitembed seconds (>= 1: we are faster).
#include <jitembed/codec/video.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "codecs/codec_benches.hpp"

namespace jitembed::bench {

namespace {

namespace fs = std::filesystem;

bool run_quiet(const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()) == 0; }

}  // namespace

void run_video_benchmarks(reporter& r) {
  const fs::path dir = fs::temp_directory_path() / ("jitembed_video_bench_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path clip = dir / "clip_640x360_24fps_10s.mp4";
  if (!run_quiet("ffmpeg -nostdin -v error -y -f lavfi -i testsrc2=size=640x360:rate=24 -t 10 -c:v libx264 -preset veryfast "
                 "-pix_fmt yuv420p " + clip.string())) {
    std::fprintf(stderr, "video bench: the ffmpeg CLI could not make the clip; skipped\n");
    fs::remove_all(dir);
    return;
  }
  std::ifstream in(clip, std::ios::binary);
  std::vector<char> raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const bytes_view bytes(reinterpret_cast<const std::byte*>(raw.data()), raw.size());
  auto info = codec::probe_video(bytes, {});
  if (!info) {
    std::fprintf(stderr, "video bench: probe failed: %s\n", info.error().message.c_str());
    fs::remove_all(dir);
    return;
  }
  const double frames = static_cast<double>(info->frame_count);
  const nlohmann::json clip_desc = {{"clip", "640x360 24fps 10s h264 (testsrc2, x264 veryfast)"}, {"frames", info->frame_count}};

  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<int> thread_counts = {1};
  if (hw > 1) thread_counts.push_back(hw);
  for (int threads : thread_counts) {
    codec::video_decode_options opts;
    opts.num_frames = 0;  // every frame, native size, RGB
    opts.threads = threads;
    bool ok = true;
    auto ours = [&] {
      auto t = codec::decode_video(bytes, opts, {});
      ok = ok && t && t->size(0) == info->frame_count;
    };
    const std::string base = "ffmpeg -nostdin -v error -threads " + std::to_string(threads) + " -i " + clip.string();
    auto cli_null = [&] { ok = ok && run_quiet(base + " -f null -"); };
    auto cli_rgb = [&] { ok = ok && run_quiet(base + " -pix_fmt rgb24 -f null -"); };
    const auto [t_ours, t_null] = side_by_side(3, ours, cli_null);
    const auto [t_ours2, t_rgb] = side_by_side(3, ours, cli_rgb);
    if (!ok) std::fprintf(stderr, "video bench: a decode failed (threads=%d)\n", threads);
    const double best = std::min(t_ours, t_ours2);
    nlohmann::json extra = clip_desc;
    extra["threads"] = threads;
    const std::string suffix = "/threads=" + std::to_string(threads);
    r.add("video/decode_all_rgb" + suffix, "frames_per_s", frames / best, "frames/s", extra);
    r.add("video/ffmpeg_cli_null" + suffix, "frames_per_s", frames / t_null, "frames/s", extra);
    r.add("video/ffmpeg_cli_rgb24_null" + suffix, "frames_per_s", frames / t_rgb, "frames/s", extra);
    r.add("video/decode_vs_ffmpeg_null" + suffix, "ratio", t_null / t_ours, "x", extra, 0.9);
    r.add("video/decode_vs_ffmpeg_rgb24" + suffix, "ratio", t_rgb / t_ours2, "x", extra);

    // The loader case: every frame into one [T,H,W,3] staging buffer reused across repetitions (no fresh
    // pages to fault in), against the same `-f null` run.
    auto out_shape = codec::video_output_shape(bytes, opts, {});
    if (!out_shape) {
      std::fprintf(stderr, "video bench: video_output_shape failed: %s\n", out_shape.error().message.c_str());
      continue;
    }
    tensor staging = tensor::empty(*out_shape, dtype::u8);
    bool ok_into = true;
    auto into = [&] { ok_into = ok_into && codec::decode_video_into(bytes, opts, {}, staging.view()).has_value(); };
    const auto [t_into, t_null2] = side_by_side(3, into, cli_null);
    if (!ok_into || !ok) std::fprintf(stderr, "video bench: decode_video_into failed (threads=%d)\n", threads);
    r.add("video/decode_into_reused" + suffix, "frames_per_s", frames / t_into, "frames/s", extra);
    r.add("video/decode_into_vs_ffmpeg_null" + suffix, "ratio", t_null2 / t_into, "x", extra, 0.9);
  }

  // The training-loader case: 8 frames at uniform stride (sequential decode of the whole clip).
  codec::video_decode_options eight;
  eight.num_frames = 8;
  eight.threads = hw;
  const double t8 = best_seconds(3, [&] { (void)codec::decode_video(bytes, eight, {}); });
  r.add("video/decode_8_uniform/threads=" + std::to_string(hw), "clips_per_s", 1.0 / t8, "clips/s", clip_desc);
  const double tp = best_seconds(20, [&] { (void)codec::probe_video(bytes, {}); });
  r.add("video/probe", "probes_per_s", 1.0 / tp, "1/s", clip_desc);

  std::error_code ec;
  fs::remove_all(dir, ec);
}

}  // namespace jitembed::bench
