// nvcc-compiled half of the CUDA tests: wraps the .cuh kernels behind host functions.
#include "jitembed/cuda/buffer.hpp"
#include "jitembed/cuda/preprocess.cuh"
#include "kernels.hpp"

namespace jitembed::cuda::test {

tensor normalize_on_device(const tensor& in, dtype out_dtype, const float* mean, const float* stdev) {
  auto s = stream::create().value();
  tensor d_in = empty_device(in.shape(), dtype::u8, s);
  const shape out_shape{in.size(0), in.size(3), in.size(1), in.size(2)};
  tensor d_out = empty_device(out_shape, out_dtype, s);
  copy_async(d_in, in, s);
  normalize_hwc_to_chw(d_in, d_out, normalize_params::from_mean_std(mean, stdev, static_cast<int>(in.size(3))), s);
  tensor host = tensor::empty(out_shape, out_dtype);
  copy_async(host, d_out, s);
  s.synchronize();
  return host;
}

}  // namespace jitembed::cuda::test
