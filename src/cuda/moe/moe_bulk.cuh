// bulk_experts, a decode variant of the expert catalogue: the routed FP4 experts streamed by bulk copies into
// mma.sync e4m3 (sm_90+, release numerics, 1-16 tokens; preferred from 8). See moe_bulk.cu; its catalogue functions
// are declared in moe_catalogue.h. Internal to src/cuda/moe.
#pragma once
