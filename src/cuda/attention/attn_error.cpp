// The one place the attention-side CUDA code throws flashseek::Error (see cuda/common/attn_helpers.cuh for why
// the message is formatted outside fmt).
#include "util/error.h"

#include <string>

namespace flashseek::cuda::attn_detail {

[[noreturn]] void throw_error(const std::string& msg) { throw Error(msg); }

}  // namespace flashseek::cuda::attn_detail
