// Mends for kernels of the libtorch this project is built against that compute wrong results.
// Header-only: the torch plugin and the runtime (the two places that include torch) call
// mend_torch_kernels() once before running anything.
#pragma once

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/library.h>
#include <torch/version.h>

namespace rannc {

#if TORCH_VERSION_MAJOR == 1 && TORCH_VERSION_MINOR == 13
// libtorch 1.13's CPU gelu_backward (the exact, erf form) reads a gradient that is not
// contiguous wrongly: a GELU whose output is transposed before use (wav2vec2's feature
// extractor) gets input gradients near 1e28, in stage files and in the unpartitioned model
// alike. The out= variant is right on contiguous operands, so the functional op hands it those.
inline at::Tensor gelu_backward_contiguous(const at::Tensor& grad, const at::Tensor& self, c10::string_view approximate) {
  auto input = self.contiguous();
  auto result = at::empty_like(input, at::MemoryFormat::Contiguous);
  return at::gelu_backward_outf(grad.contiguous(), input, approximate, result);
}

inline void mend_torch_kernels() {
  static const bool mended = [] {
    // Replacing a kernel makes the dispatcher warn on stderr; the replacement is deliberate.
    struct Silent : c10::WarningHandler {
      void process(const c10::SourceLocation&, const std::string&, const bool) override {}
    } silent;
    c10::Warning::WarningHandlerGuard guard(&silent);
    static torch::Library library(torch::Library::IMPL, "aten", c10::DispatchKey::CPU, __FILE__, __LINE__);
    library.impl("gelu_backward", TORCH_FN(gelu_backward_contiguous));
    return true;
  }();
  (void)mended;
}
#else
inline void mend_torch_kernels() {}
#endif

}  // namespace rannc
