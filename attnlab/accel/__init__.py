"""attnlab.accel: CPU speed-ups applied to a finished model from outside its code (see docs/architecture.md).

`optimize(model)` swaps the fast modules in; `skip_padding` lets an encoder's forward read a padded batch's
real tokens only; `fused_layers(False)` turns the fused encoder layers off in a block; `set_cpu_gemm` picks
oneDNN or MKL for float32 products. The kernels (`few_row_gemm`, `int8_gemm`) are C++ in ``csrc/``, built
on first use and called as ``torch.ops.attnlab`` custom ops (`kernel_build`).
"""

from attnlab.accel.derived import clear_derived_weights
from attnlab.accel.fused_layer import fused_layers
from attnlab.accel.onednn_linear import cpu_gemm, set_cpu_gemm
from attnlab.accel.swaps import optimize
from attnlab.accel.unpadded import skip_padding

__all__ = ["clear_derived_weights", "cpu_gemm", "fused_layers", "optimize", "set_cpu_gemm", "skip_padding"]
