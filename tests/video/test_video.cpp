// Video codec tests: encode/probe/decode round trips, decoding of clips made by the ffmpeg CLI compared with
// the CLI's own RGB output, frame selection, resizing, limits, container/codec policy, damaged input.
#include <doctest/doctest.h>

#include <jitembed/codec/video.hpp>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace fs = std::filesystem;
using namespace jitembed;
using namespace jitembed::codec;

namespace {

// A scratch directory for clips made by the ffmpeg CLI, removed when the test binary exits.
struct scratch_dir {
  fs::path path;
  scratch_dir() {
    path = fs::temp_directory_path() / ("jitembed_video_test_" + std::to_string(::getpid()));
    fs::create_directories(path);
  }
  ~scratch_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

const fs::path& scratch() {
  static scratch_dir d;
  return d.path;
}

bool sh(const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()) == 0; }

std::vector<std::byte> read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::vector<char> c((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(c.size());
  std::memcpy(out.data(), c.data(), c.size());
  return out;
}

// Makes (once) a 2 s, 10 fps, 160x120 testsrc clip with the given ffmpeg output arguments. Empty when the
// encoder is not in this FFmpeg build.
const std::vector<std::byte>& cli_clip(const std::string& name, const std::string& args) {
  static std::map<std::string, std::vector<std::byte>> cache;
  auto it = cache.find(name);
  if (it != cache.end()) return it->second;
  const fs::path p = scratch() / name;
  std::vector<std::byte> bytes;
  if (sh("ffmpeg -nostdin -v error -y -f lavfi -i testsrc=size=160x120:rate=10 -t 2 " + args + " " + p.string()))
    bytes = read_file(p);
  return cache[name] = std::move(bytes);
}

// All frames of a clip as the ffmpeg CLI decodes and converts them (rgb24, optional bicubic resize).
std::vector<std::uint8_t> cli_rgb(const std::string& name, int w = 0, int h = 0) {
  const fs::path in = scratch() / name;
  const fs::path out = scratch() / (name + "." + std::to_string(w) + "x" + std::to_string(h) + ".rgb");
  std::string vf = w ? "-vf scale=" + std::to_string(w) + ":" + std::to_string(h) + ":flags=bicubic " : "";
  REQUIRE(sh("ffmpeg -nostdin -v error -y -i " + in.string() + " " + vf + "-fps_mode passthrough -f rawvideo -pix_fmt rgb24 " +
             out.string()));
  auto b = read_file(out);
  std::vector<std::uint8_t> v(b.size());
  std::memcpy(v.data(), b.data(), b.size());
  return v;
}

// Largest absolute difference between output slot `slot` and CLI frame `index`.
int max_diff(const tensor& t, std::size_t slot, const std::vector<std::uint8_t>& cli, std::size_t index) {
  const std::size_t fb = static_cast<std::size_t>(t.size(1) * t.size(2) * 3);
  REQUIRE((index + 1) * fb <= cli.size());
  const auto* a = t.data<std::uint8_t>() + slot * fb;
  const auto* b = cli.data() + index * fb;
  int m = 0;
  for (std::size_t i = 0; i < fb; ++i) m = std::max(m, std::abs(int(a[i]) - int(b[i])));
  return m;
}

// A smooth synthetic clip: moving diagonal gradients, one colour per channel.
tensor smooth_clip(int t, int h, int w) {
  tensor c = tensor::empty({t, h, w, 3}, dtype::u8);
  auto* p = c.data<std::uint8_t>();
  for (int f = 0; f < t; ++f)
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) {
        auto* px = p + ((static_cast<std::size_t>(f) * h + y) * w + x) * 3;
        px[0] = static_cast<std::uint8_t>(40 + (x * 2 + f * 3) % 170);
        px[1] = static_cast<std::uint8_t>(60 + (y * 2 + f) % 150);
        px[2] = static_cast<std::uint8_t>(128 + 60 * std::sin((x + y + f * 2) * 0.05));
      }
  return c;
}

double mean_abs_error(const std::uint8_t* a, const std::uint8_t* b, std::size_t n) {
  double s = 0;
  for (std::size_t i = 0; i < n; ++i) s += std::abs(int(a[i]) - int(b[i]));
  return s / static_cast<double>(n);
}

const std::string kMp4 = "mov,mp4,m4a,3gp,3g2,mj2";
const std::string kMkv = "matroska,webm";

}  // namespace

TEST_CASE("video: encode -> probe -> decode round trip of a smooth clip") {
  tensor clip = smooth_clip(12, 64, 96);
  auto mp4 = encode_video(clip, {.fps = 24.0, .crf = 18, .preset = "veryfast"});
  REQUIRE(mp4);
  CHECK(mp4->size() > 100);

  auto info = probe_video(*mp4, decode_limits{});
  REQUIRE(info);
  CHECK(info->container == kMp4);
  CHECK(info->codec == "h264");
  CHECK(info->width == 96);
  CHECK(info->height == 64);
  CHECK(info->fps == doctest::Approx(24.0));
  CHECK(info->frame_count == 12);
  CHECK(info->frame_count_exact);
  CHECK(info->duration_seconds == doctest::Approx(0.5).epsilon(0.01));

  video_decode_options all;
  all.num_frames = 0;
  auto back = decode_video(*mp4, all, decode_limits{});
  REQUIRE(back);
  CHECK(back->shape() == shape{12, 64, 96, 3});
  CHECK(back->dtype() == dtype::u8);
  const std::size_t fb = 64 * 96 * 3;
  for (int f = 0; f < 12; ++f) {
    const double mae = mean_abs_error(back->data<std::uint8_t>() + f * fb, clip.data<std::uint8_t>() + f * fb, fb);
    INFO("frame " << f << " mean abs error " << mae);
    CHECK(mae < 3.0);
  }
  // A shifted frame is far off: the comparison above is not vacuous.
  CHECK(mean_abs_error(back->data<std::uint8_t>(), clip.data<std::uint8_t>() + 6 * fb, fb) > 5.0);

  // Non-integer frame rate.
  auto ntsc = encode_video(clip, {.fps = 29.97});
  REQUIRE(ntsc);
  CHECK(probe_video(*ntsc, {})->fps == doctest::Approx(29.97).epsilon(0.001));
}

TEST_CASE("video: video_codec models the codec concept") {
  static_assert(codec::codec<video_codec>);
  video_codec vc;
  vc.decode_options.num_frames = 4;
  tensor clip = smooth_clip(6, 32, 48);
  auto bound = vc.max_encoded_size(clip);
  REQUIRE(bound);
  CHECK(*bound >= clip.nbytes());
  auto bytes = encode_to_buffer(vc, clip);
  REQUIRE(bytes);
  auto back = vc.decode(*bytes, decode_limits{});
  REQUIRE(back);
  CHECK(back->shape() == shape{4, 32, 48, 3});

  // Into a caller's buffer of the advertised bound, and into one that is too small. (libx264's output is
  // not bit-reproducible from run to run: it depends on uninitialised heap bytes, as the ffmpeg CLI's
  // does under MALLOC_PERTURB_; so sizes are compared loosely.)
  byte_buffer roomy(*bound);
  auto n = vc.encode(clip, roomy);
  REQUIRE_MESSAGE(n, (n ? std::string() : n.error().message));
  CHECK(*n > 100);
  CHECK(*n < clip.nbytes());
  auto again = vc.decode(bytes_view(roomy.data(), *n), decode_limits{});
  REQUIRE(again);
  CHECK(again->shape() == shape{4, 32, 48, 3});
  byte_buffer small(*n / 2);
  CHECK(vc.encode(clip, small).code() == errc::buffer_too_small);
}

TEST_CASE("video: encode rejects what it cannot encode") {
  CHECK(encode_video(tensor::zeros({2, 16, 16, 3}, dtype::f32), {}).code() == errc::dtype_mismatch);
  CHECK(encode_video(tensor::zeros({16, 16, 3}, dtype::u8), {}).code() == errc::invalid_argument);
  CHECK(encode_video(tensor::zeros({2, 15, 16, 3}, dtype::u8), {}).code() == errc::invalid_argument);
  CHECK(encode_video(tensor::zeros({2, 16, 16, 4}, dtype::u8), {}).code() == errc::invalid_argument);
  CHECK(encode_video(tensor::zeros({0, 16, 16, 3}, dtype::u8), {}).code() == errc::invalid_argument);
  CHECK(encode_video(tensor::zeros({2, 16, 16, 3}, dtype::u8), {.fps = 0}).code() == errc::invalid_argument);
  CHECK(encode_video(tensor::zeros({2, 16, 16, 3}, dtype::u8), {.crf = 60}).code() == errc::invalid_argument);
  CHECK(encode_video(tensor::zeros({2, 16, 16, 3}, dtype::u8), {.preset = "warp-speed"}).code() == errc::invalid_argument);
  CHECK(encode_video(tensor::zeros({2, 16, 16, 3}, dtype::u8), {.preset = "placebo"}));
}

TEST_CASE("video: clips made by the ffmpeg CLI decode exactly like the CLI") {
  struct clip_case {
    std::string name, args, container, codec;
    bool exact_count;
  };
  const std::vector<clip_case> cases = {
      {"h264.mp4", "-c:v libx264 -pix_fmt yuv420p", kMp4, "h264", true},
      {"vp9.webm", "-c:v libvpx-vp9 -deadline realtime -cpu-used 8 -pix_fmt yuv420p", kMkv, "vp9", false},
      {"hevc.mkv", "-c:v libx265 -x265-params log-level=error -pix_fmt yuv420p", kMkv, "hevc", false},
      {"vp8.webm", "-c:v libvpx -deadline realtime -cpu-used 8 -pix_fmt yuv420p", kMkv, "vp8", false},
      {"mpeg4.mp4", "-c:v mpeg4 -q:v 3", kMp4, "mpeg4", true},
  };
  for (const auto& c : cases) {
    SUBCASE(c.name.c_str()) {
      const auto& bytes = cli_clip(c.name, c.args);
      REQUIRE_MESSAGE(!bytes.empty(), "ffmpeg could not make " << c.name);
      auto info = probe_video(bytes, {});
      REQUIRE(info);
      CHECK(info->container == c.container);
      CHECK(info->codec == c.codec);
      CHECK(info->width == 160);
      CHECK(info->height == 120);
      CHECK(info->fps == doctest::Approx(10.0));
      CHECK(info->duration_seconds == doctest::Approx(2.0).epsilon(0.06));
      CHECK(info->frame_count_exact == c.exact_count);
      CHECK(info->frame_count == 20);

      video_decode_options all;
      all.num_frames = 0;
      auto t = decode_video(bytes, all, {});
      REQUIRE(t);
      CHECK(t->shape() == shape{20, 120, 160, 3});
      const auto ref = cli_rgb(c.name);
      REQUIRE(ref.size() == t->nbytes());
      int worst = 0;
      for (std::size_t f = 0; f < 20; ++f) worst = std::max(worst, max_diff(*t, f, ref, f));
      CHECK(worst <= 2);
      // Neighbouring frames of testsrc differ, so the index check has teeth.
      CHECK(max_diff(*t, 3, ref, 4) > 2);
    }
  }
}

TEST_CASE("video: AV1 decodes like the CLI") {
  auto bytes = cli_clip("av1.mkv", "-c:v libaom-av1 -cpu-used 8 -row-mt 1 -pix_fmt yuv420p");
  std::string name = "av1.mkv";
  if (bytes.empty()) {
    bytes = cli_clip("av1_svt.mkv", "-c:v libsvtav1 -preset 12 -pix_fmt yuv420p");
    name = "av1_svt.mkv";
  }
  if (bytes.empty()) {
    MESSAGE("no AV1 encoder (libaom-av1 / libsvtav1) in this FFmpeg: AV1 decode not tested");
    return;
  }
  auto info = probe_video(bytes, {});
  REQUIRE(info);
  CHECK(info->codec == "av1");
  video_decode_options all;
  all.num_frames = 0;
  auto t = decode_video(bytes, all, {});
  REQUIRE(t);
  CHECK(t->shape() == shape{20, 120, 160, 3});
  const auto ref = cli_rgb(name);
  REQUIRE(ref.size() == t->nbytes());
  for (std::size_t f = 0; f < 20; ++f) CHECK(max_diff(*t, f, ref, f) <= 2);
}

TEST_CASE("video: uniform-stride frame selection") {
  const auto& bytes = cli_clip("h264.mp4", "-c:v libx264 -pix_fmt yuv420p");
  const auto& webm = cli_clip("vp9.webm", "-c:v libvpx-vp9 -deadline realtime -cpu-used 8 -pix_fmt yuv420p");
  REQUIRE(!bytes.empty());
  REQUIRE(!webm.empty());
  const auto ref = cli_rgb("h264.mp4");
  const auto ref_webm = cli_rgb("vp9.webm");

  SUBCASE("T < N: round(i*(N-1)/(T-1))") {
    video_decode_options o;
    o.num_frames = 5;  // N = 20: 0, 4.75, 9.5, 14.25, 19 -> 0, 5, 10, 14, 19
    const std::size_t expect[] = {0, 5, 10, 14, 19};
    auto t = decode_video(bytes, o, {});
    REQUIRE(t);
    CHECK(t->shape() == shape{5, 120, 160, 3});
    for (std::size_t i = 0; i < 5; ++i) CHECK(max_diff(*t, i, ref, expect[i]) <= 2);
    // The same selection from WebM, whose frame count is counted rather than declared.
    auto w = decode_video(webm, o, {});
    REQUIRE(w);
    for (std::size_t i = 0; i < 5; ++i) CHECK(max_diff(*w, i, ref_webm, expect[i]) <= 2);
  }
  SUBCASE("T == 1 is the first frame") {
    video_decode_options o;
    o.num_frames = 1;
    auto t = decode_video(bytes, o, {});
    REQUIRE(t);
    CHECK(max_diff(*t, 0, ref, 0) <= 2);
  }
  SUBCASE("T > N repeats frames uniformly") {
    video_decode_options o;
    o.num_frames = 39;  // i*19/38 = i/2: every frame twice (rounding half up)
    auto t = decode_video(bytes, o, {});
    REQUIRE(t);
    CHECK(t->shape() == shape{39, 120, 160, 3});
    for (std::size_t i = 0; i < 39; ++i) CHECK(max_diff(*t, i, ref, (i + 1) / 2) <= 2);
  }
  SUBCASE("thread counts give the same frames") {
    video_decode_options a, b;
    a.num_frames = b.num_frames = 6;
    a.threads = 1;
    b.threads = 2;
    auto ta = decode_video(bytes, a, {});
    auto tb = decode_video(bytes, b, {});
    REQUIRE(ta);
    REQUIRE(tb);
    CHECK(std::memcmp(ta->data(), tb->data(), ta->nbytes()) == 0);
  }
}

TEST_CASE("video: timestamp selection is nearest at-or-after") {
  const auto& bytes = cli_clip("h264.mp4", "-c:v libx264 -pix_fmt yuv420p");
  const auto& webm = cli_clip("vp9.webm", "-c:v libvpx-vp9 -deadline realtime -cpu-used 8 -pix_fmt yuv420p");
  REQUIRE(!bytes.empty());
  const auto ref = cli_rgb("h264.mp4");
  const auto ref_webm = cli_rgb("vp9.webm");
  video_decode_options o;
  // 10 fps: frame k is at k/10 s. Unsorted on purpose; 5.0 is past the end (last frame).
  o.timestamps = {1.0, 0.0, 0.5, 0.55, 0.3, 1.95, 5.0, 0.0};
  const std::size_t expect[] = {10, 0, 5, 6, 3, 19, 19, 0};
  auto t = decode_video(bytes, o, {});
  REQUIRE(t);
  CHECK(t->shape() == shape{8, 120, 160, 3});
  for (std::size_t i = 0; i < 8; ++i) {
    INFO("timestamp " << o.timestamps[i]);
    CHECK(max_diff(*t, i, ref, expect[i]) <= 2);
  }
  auto w = decode_video(webm, o, {});
  REQUIRE(w);
  for (std::size_t i = 0; i < 8; ++i) CHECK(max_diff(*w, i, ref_webm, expect[i]) <= 2);

  video_decode_options bad;
  bad.timestamps = {0.5, -1.0};
  CHECK(decode_video(bytes, bad, {}).code() == errc::invalid_argument);
  bad.timestamps = {std::nan("")};
  CHECK(decode_video(bytes, bad, {}).code() == errc::invalid_argument);
}

TEST_CASE("video: resized output") {
  const auto& bytes = cli_clip("h264.mp4", "-c:v libx264 -pix_fmt yuv420p");
  REQUIRE(!bytes.empty());
  video_decode_options o;
  o.num_frames = 0;
  o.width = 64;
  o.height = 48;
  auto t = decode_video(bytes, o, {});
  REQUIRE(t);
  CHECK(t->shape() == shape{20, 48, 64, 3});
  const auto ref = cli_rgb("h264.mp4", 64, 48);
  REQUIRE(ref.size() == t->nbytes());
  for (std::size_t f = 0; f < 20; ++f) CHECK(max_diff(*t, f, ref, f) <= 3);

  o.width = 0;  // one without the other
  CHECK(decode_video(bytes, o, {}).code() == errc::invalid_argument);
}

TEST_CASE("video: limits are checked before decoding") {
  const auto& bytes = cli_clip("h264.mp4", "-c:v libx264 -pix_fmt yuv420p");
  REQUIRE(!bytes.empty());
  video_decode_options o;  // 8 frames
  auto check = [&](const decode_limits& lim, const video_decode_options& opts, const char* field) {
    auto r = decode_video(bytes, opts, lim);
    CHECK(r.code() == errc::limit_exceeded);
    if (!r) CHECK_MESSAGE(r.error().message.find(field) != std::string::npos, r.error().message);
  };
  decode_limits lim;
  lim.max_video_frames = 4;
  check(lim, o, "max_video_frames");
  video_decode_options all;
  all.num_frames = 0;
  lim.max_video_frames = 19;  // the clip has 20
  check(lim, all, "max_video_frames");
  lim.max_video_frames = 20;
  CHECK(decode_video(bytes, all, lim));

  lim = {};
  lim.max_image_pixels = 160 * 120 - 1;
  check(lim, o, "max_image_pixels");
  lim.max_image_pixels = 160 * 120;
  CHECK(decode_video(bytes, o, lim));
  video_decode_options big = o;
  big.width = 320;
  big.height = 240;
  check(lim, big, "max_image_pixels");  // the output size counts too

  lim = {};
  lim.max_decoded_bytes = 8ull * 120 * 160 * 3 - 1;
  check(lim, o, "max_decoded_bytes");
  lim.max_decoded_bytes = 8ull * 120 * 160 * 3;
  CHECK(decode_video(bytes, o, lim));

  lim = {};
  lim.max_record_bytes = bytes.size() - 1;
  check(lim, o, "max_record_bytes");
  CHECK(probe_video(bytes, lim).code() == errc::limit_exceeded);

  video_decode_options neg;
  neg.num_frames = -1;
  CHECK(decode_video(bytes, neg, {}).code() == errc::invalid_argument);
}

TEST_CASE("video: containers and codecs outside the policy are refused") {
  SUBCASE("AVI") {
    const auto& avi = cli_clip("mpeg4.avi", "-c:v mpeg4");
    REQUIRE(!avi.empty());
    auto r = probe_video(avi, {});
    CHECK(r.code() == errc::unsupported_format);
    if (!r) CHECK(r.error().message.find("'avi'") != std::string::npos);
    CHECK(decode_video(avi, {}, {}).code() == errc::unsupported_format);
    video_policy p;
    p.formats.push_back("avi");
    CHECK(probe_video(avi, {}, p));  // allowed when the policy says so
  }
  SUBCASE("raw H.264 stream") {
    const auto& raw = cli_clip("raw.h264", "-c:v libx264 -f h264");
    REQUIRE(!raw.empty());
    CHECK(decode_video(raw, {}, {}).code() == errc::unsupported_format);
  }
  SUBCASE("HLS playlist naming a local file") {
    // A valid clip on disk that the playlist points at; it must never be opened.
    const auto& clip = cli_clip("h264.mp4", "-c:v libx264 -pix_fmt yuv420p");
    REQUIRE(!clip.empty());
    const std::string m3u = "#EXTM3U\n#EXT-X-VERSION:3\n#EXT-X-TARGETDURATION:2\n#EXTINF:2.0,\nfile://" +
                            (scratch() / "h264.mp4").string() + "\n#EXT-X-ENDLIST\n";
    const auto b = as_bytes_view(m3u);
    CHECK(probe_video(b, {}).code() == errc::unsupported_format);
    CHECK(decode_video(b, {}, {}).code() == errc::unsupported_format);
    video_policy p;
    p.formats.push_back("hls");  // a demuxer that opens other files is refused even when listed
    auto r = decode_video(b, {}, {}, p);
    CHECK(r.code() == errc::invalid_argument);
  }
  SUBCASE("concat script") {
    const std::string script = "ffconcat version 1.0\nfile '" + (scratch() / "h264.mp4").string() + "'\n";
    CHECK(probe_video(as_bytes_view(script), {}).code() == errc::unsupported_format);
    video_policy p;
    p.formats = {"concat"};
    CHECK(probe_video(as_bytes_view(script), {}, p).code() == errc::invalid_argument);
  }
  SUBCASE("codec not in the policy") {
    const auto& webm = cli_clip("vp9.webm", "-c:v libvpx-vp9 -deadline realtime -cpu-used 8 -pix_fmt yuv420p");
    REQUIRE(!webm.empty());
    video_policy p;
    p.codecs = {"h264"};
    auto r = decode_video(webm, {}, {}, p);
    CHECK(r.code() == errc::unsupported_codec);
    if (!r) CHECK(r.error().message.find("'vp9'") != std::string::npos);
    p.formats = {kMp4};
    CHECK(probe_video(webm, {}, p).code() == errc::unsupported_format);
  }
  SUBCASE("not a video") {
    CHECK(probe_video(bytes_view{}, {}).code() == errc::truncated);
    std::vector<std::byte> noise(4096);
    std::mt19937 rng(7);
    for (auto& b : noise) b = static_cast<std::byte>(rng());
    const auto r = decode_video(noise, {}, {});
    CHECK(!r);
    CHECK((r.code() == errc::bad_magic || r.code() == errc::unsupported_format));
  }
}

TEST_CASE("video: truncated and corrupted clips fail cleanly") {
  const auto& mp4 = cli_clip("h264.mp4", "-c:v libx264 -pix_fmt yuv420p");  // moov at the end
  const auto& fast = cli_clip("h264_faststart.mp4", "-c:v libx264 -pix_fmt yuv420p -movflags +faststart");
  const auto& webm = cli_clip("vp9.webm", "-c:v libvpx-vp9 -deadline realtime -cpu-used 8 -pix_fmt yuv420p");
  REQUIRE(!mp4.empty());
  REQUIRE(!fast.empty());
  REQUIRE(!webm.empty());

  SUBCASE("moov missing") {
    bytes_view half(mp4.data(), mp4.size() / 2);
    CHECK(probe_video(half, {}).code() == errc::truncated);
    CHECK(decode_video(half, {}, {}).code() == errc::truncated);
  }
  SUBCASE("samples missing (faststart, cut inside mdat)") {
    bytes_view cut(fast.data(), fast.size() * 6 / 10);
    auto info = probe_video(cut, {});
    REQUIRE(info);  // the header is intact
    CHECK(info->frame_count == 20);
    video_decode_options o;
    o.num_frames = 4;  // needs the last frame
    CHECK(decode_video(cut, o, {}).code() == errc::truncated);
    o.num_frames = 1;  // the first frame is there
    CHECK(decode_video(cut, o, {}));
  }
  SUBCASE("WebM cut in half") {
    bytes_view half(webm.data(), webm.size() / 2);
    CHECK(probe_video(half, {}));  // the header is intact
    CHECK(decode_video(half, {}, {}).code() == errc::truncated);
    video_decode_options early;
    early.timestamps = {0.0, 0.2};
    CHECK(decode_video(half, early, {}));  // frames before the cut decode
    early.timestamps = {1.9};
    CHECK(decode_video(half, early, {}).code() == errc::truncated);
  }
  SUBCASE("every prefix of a small clip") {
    for (std::size_t n = 0; n < webm.size(); n += std::max<std::size_t>(1, webm.size() / 97)) {
      video_decode_options o;
      o.num_frames = 3;
      auto r = decode_video(bytes_view(webm.data(), n), o, {});
      if (r) CHECK(r->shape() == shape{3, 120, 160, 3});
    }
  }
  SUBCASE("bit flips") {
    std::mt19937 rng(1234);
    for (const auto* clip : {&mp4, &webm}) {
      for (int trial = 0; trial < 40; ++trial) {
        std::vector<std::byte> bad = *clip;
        for (int k = 0; k < 1 + trial % 8; ++k) {
          const std::size_t pos = rng() % bad.size();
          bad[pos] ^= static_cast<std::byte>(1u << (rng() % 8));
        }
        video_decode_options o;
        o.num_frames = 4;
        auto r = decode_video(bad, o, {});
        if (r) {
          CHECK(r->shape()[0] == 4);
          CHECK(r->shape()[3] == 3);
        } else {
          CHECK(r.code() != errc::ok);
          CHECK(!r.error().message.empty());
        }
      }
    }
  }
}

TEST_CASE("video: concurrent decodes in several threads agree") {
  const auto& bytes = cli_clip("h264.mp4", "-c:v libx264 -pix_fmt yuv420p");
  REQUIRE(!bytes.empty());
  video_decode_options o;
  o.num_frames = 5;
  o.threads = 1;
  auto ref = decode_video(bytes, o, {});
  REQUIRE(ref);
  int mismatches[3] = {0, 0, 0};
  std::vector<std::thread> pool;
  for (int k = 0; k < 3; ++k)
    pool.emplace_back([&, k] {
      for (int rep = 0; rep < 3; ++rep) {
        auto t = decode_video(bytes, o, {});
        if (!t || std::memcmp(t->data(), ref->data(), ref->nbytes()) != 0) ++mismatches[k];
      }
    });
  for (auto& th : pool) th.join();
  CHECK(mismatches[0] + mismatches[1] + mismatches[2] == 0);
}

namespace {

// A tensor_view over the first bytes of `buf` with the given shape (u8, contiguous, CPU).
tensor_view u8_view(std::uint8_t* buf, const shape& s) { return tensor_view(buf, dtype::u8, s); }

// decode_video_into into a fresh buffer pre-filled with `fill`, compared byte for byte with decode_video.
void check_into_matches(const std::vector<std::byte>& bytes, const video_decode_options& o, std::uint8_t fill) {
  auto ref = decode_video(bytes, o, {});
  REQUIRE(ref);
  auto s = video_output_shape(bytes, o, {});
  REQUIRE(s);
  CHECK(*s == ref->shape());
  std::vector<std::uint8_t> buf(ref->nbytes(), fill);
  auto ok = decode_video_into(bytes, o, {}, u8_view(buf.data(), ref->shape()));
  REQUIRE_MESSAGE(ok, ok.error().message);
  CHECK(std::memcmp(buf.data(), ref->data(), buf.size()) == 0);
  // Reused: a second decode into the same (now full) buffer gives the same bytes.
  auto ok2 = decode_video_into(bytes, o, {}, u8_view(buf.data(), ref->shape()));
  REQUIRE(ok2);
  CHECK(std::memcmp(buf.data(), ref->data(), buf.size()) == 0);
}

}  // namespace

TEST_CASE("video: decode_video_into equals decode_video") {
  const auto& bytes = cli_clip("h264.mp4", "-c:v libx264 -pix_fmt yuv420p");
  const auto& webm = cli_clip("vp9.webm", "-c:v libvpx-vp9 -deadline realtime -cpu-used 8 -pix_fmt yuv420p");
  REQUIRE(!bytes.empty());
  REQUIRE(!webm.empty());
  SUBCASE("all frames, native size") {
    video_decode_options o;
    o.num_frames = 0;
    check_into_matches(bytes, o, 0xAB);
    check_into_matches(webm, o, 0x00);
  }
  SUBCASE("uniform stride, repeated frames") {
    video_decode_options o;
    o.num_frames = 39;
    check_into_matches(bytes, o, 0x5A);
    o.num_frames = 5;
    check_into_matches(webm, o, 0xFF);
  }
  SUBCASE("resized, including odd sizes") {
    video_decode_options o;
    o.num_frames = 0;
    o.width = 64;
    o.height = 48;
    check_into_matches(bytes, o, 0xAB);
    o.num_frames = 7;
    o.width = 61;
    o.height = 37;
    check_into_matches(bytes, o, 0x11);
    o.width = 203;
    o.height = 151;
    check_into_matches(webm, o, 0xEE);
  }
  SUBCASE("timestamps, unsorted with duplicates and past the end") {
    video_decode_options o;
    o.timestamps = {1.0, 0.0, 0.5, 0.55, 0.3, 1.95, 5.0, 0.0};
    check_into_matches(bytes, o, 0xAB);
    check_into_matches(webm, o, 0x00);
    o.width = 45;
    o.height = 33;
    check_into_matches(bytes, o, 0x77);
  }
}

TEST_CASE("video: decode_video_into checks the output tensor before decoding") {
  const auto& bytes = cli_clip("h264.mp4", "-c:v libx264 -pix_fmt yuv420p");
  REQUIRE(!bytes.empty());
  video_decode_options o;
  o.num_frames = 4;
  auto s = video_output_shape(bytes, o, {});
  REQUIRE(s);
  CHECK(*s == shape{4, 120, 160, 3});
  std::vector<std::uint8_t> buf(4 * 120 * 160 * 3 * 2, 0x42);
  auto untouched = [&] { return std::all_of(buf.begin(), buf.end(), [](std::uint8_t v) { return v == 0x42; }); };
  auto expect_invalid = [&](const tensor_view& v, const char* what) {
    auto r = decode_video_into(bytes, o, {}, v);
    CHECK(r.code() == errc::invalid_argument);
    if (!r) CHECK_MESSAGE(r.error().message.find(what) != std::string::npos, r.error().message);
    CHECK(untouched());
  };
  expect_invalid(u8_view(buf.data(), shape{5, 120, 160, 3}), "shape [5,120,160,3]");
  expect_invalid(u8_view(buf.data(), shape{4, 120, 161, 3}), "shape");
  expect_invalid(u8_view(buf.data(), shape{4, 160, 120, 3}), "shape");
  expect_invalid(u8_view(buf.data(), shape{4, 120, 160, 4}), "shape");
  expect_invalid(u8_view(buf.data(), shape{4 * 120, 160, 3}), "rank 3");
  expect_invalid(tensor_view(buf.data(), dtype::f32, shape{4, 120, 160, 3}), "dtype f32");
  expect_invalid(tensor_view(buf.data(), dtype::i8, shape{4, 120, 160, 3}), "dtype");
  expect_invalid(tensor_view(buf.data(), dtype::u8, shape{4, 120, 160, 3}, device::cuda(0)), "not on the CPU");
  // Every other frame of a twice-as-long buffer: right shape, not contiguous.
  expect_invalid(tensor_view(buf.data(), dtype::u8, shape{4, 120, 160, 3}, shape{2 * 120 * 160 * 3, 160 * 3, 3, 1}, device::cpu()),
                 "not contiguous");
  expect_invalid(tensor_view(static_cast<void*>(nullptr), dtype::u8, shape{4, 120, 160, 3}), "no data");
  // Resized output: the shape follows opts.width/height.
  o.width = 64;
  o.height = 48;
  expect_invalid(u8_view(buf.data(), shape{4, 120, 160, 3}), "[4,48,64,3]");
  // The options and limits are checked as decode_video checks them.
  o.width = 0;
  CHECK(decode_video_into(bytes, o, {}, u8_view(buf.data(), shape{4, 120, 160, 3})).code() == errc::invalid_argument);
  o.height = 0;
  decode_limits small;
  small.max_video_frames = 3;
  CHECK(decode_video_into(bytes, o, small, u8_view(buf.data(), shape{4, 120, 160, 3})).code() == errc::limit_exceeded);
  CHECK(video_output_shape(bytes, o, small).code() == errc::limit_exceeded);
  CHECK(untouched());
  // Errors from the data itself come through unchanged.
  std::vector<std::byte> junk(1000, std::byte{0x33});
  CHECK(decode_video_into(junk, o, {}, u8_view(buf.data(), shape{4, 120, 160, 3})).code() == errc::bad_magic);
}

TEST_CASE("video: decode_video_into writes nothing past the end of the output") {
  // Exact-size heap buffers (new[]): run under valgrind or ASan to catch an overflow in the converters.
  // A canary-guarded buffer checks the same in any build.
  const auto& bytes = cli_clip("h264.mp4", "-c:v libx264 -pix_fmt yuv420p");
  REQUIRE(!bytes.empty());
  struct sz {
    int w, h;
  };
  const sz sizes[] = {{0, 0}, {61, 37}, {45, 33}, {203, 151}, {1, 1}, {7, 3}};
  for (const auto& [w, h] : sizes) {
    for (int by_time = 0; by_time < 2; ++by_time) {
      video_decode_options o;
      o.width = w;
      o.height = h;
      if (by_time)
        o.timestamps = {1.95, 0.0, 1.95, 0.3};  // the last slot is filled before the others
      else
        o.num_frames = 3;
      INFO("size " << w << "x" << h << (by_time ? " timestamps" : " uniform"));
      auto s = video_output_shape(bytes, o, {});
      REQUIRE(s);
      const std::size_t nbytes = static_cast<std::size_t>(checked_numel(s->span()).value());
      auto exact = std::unique_ptr<std::uint8_t[]>(new std::uint8_t[nbytes]);
      auto ok = decode_video_into(bytes, o, {}, u8_view(exact.get(), *s));
      REQUIRE_MESSAGE(ok, ok.error().message);
      auto ref = decode_video(bytes, o, {});
      REQUIRE(ref);
      CHECK(std::memcmp(exact.get(), ref->data(), nbytes) == 0);

      constexpr std::size_t kGuard = 4096;
      std::vector<std::uint8_t> guarded(nbytes + kGuard, 0xC3);
      REQUIRE(decode_video_into(bytes, o, {}, u8_view(guarded.data(), *s)));
      CHECK(std::memcmp(guarded.data(), ref->data(), nbytes) == 0);
      CHECK(std::all_of(guarded.begin() + static_cast<std::ptrdiff_t>(nbytes), guarded.end(), [](std::uint8_t v) { return v == 0xC3; }));
    }
  }
}
