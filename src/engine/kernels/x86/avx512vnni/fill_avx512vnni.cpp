// Fills the KernelTable slots implemented for this ISA (see kernel_table.h).
#include "engine/kernels/kernel_table.h"

namespace vlmd::engine::kernels {

void FillAvx512VnniKernels(KernelTable* t) { (void)t; }

}  // namespace vlmd::engine::kernels
