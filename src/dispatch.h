// Internal: the active kernel table, shared by the C API entry points.
#ifndef FASTLN_DISPATCH_H_
#define FASTLN_DISPATCH_H_

#include "kernel_table.h"

namespace fastln {
// The table chosen by FASTLN_ISA / fastln_set_isa / CPU detection; null when FASTLN_ISA named an
// ISA that is unknown or unusable here (InitStatus() then says which).
const KernelTable *ActiveTable();
int InitStatus();
}  // namespace fastln

#endif  // FASTLN_DISPATCH_H_
