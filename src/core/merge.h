// dsv4_merge: validation of the merge arguments (spec 12.2) and the call of the module's slot.
#pragma once

#include "core/ctx.h"
#include "dsv4/dsv4.h"

namespace dsv4::detail {

dsv4_merge_args merge_args_default_values();

// Checks `args` against ctx's device (host metadata only) and runs the module's merge. Throws
// api_error naming the argument; nothing is written on failure.
void merge(dsv4_ctx& ctx, const dsv4_merge_args& args);

}  // namespace dsv4::detail
