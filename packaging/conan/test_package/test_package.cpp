// jitembed from its Conan package: a record with a JPEG field, written and parsed back.
#include <jitembed/jitembed.hpp>

#include <cstdio>

int main() {
  using namespace jitembed;
  tensor img = tensor::zeros({8, 8, 3}, dtype::u8);
  auto jpeg = codec::encode_jpeg(img, {}).value();
  auto back = codec::decode_jpeg(jpeg, {}, decode_limits{}).value();
  std::printf("test_package: jpeg %zu bytes -> %s\n", jpeg.size(), back.shape().to_string().c_str());
  return back.shape() == img.shape() ? 0 : 1;
}
