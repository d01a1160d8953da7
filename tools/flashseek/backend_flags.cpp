// add_backend_flags / backend_options (backend_flags.h).
#include "backend_flags.h"

#include "util/error.h"

namespace flashseek::cli {

void add_backend_flags(CLI::App& app, BackendFlags& f, bool with_dummy) {
    app.add_option("--backend", f.backend, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
    app.add_option("--numerics", f.numerics, "exact or release (default: exact on cpu, release on cuda)")
        ->check(CLI::IsMember({"exact", "release"}));
    app.add_option("--threads", f.threads, "CPU backend threads (0 = all cores)");
    app.add_option("--layers", f.layers, "run only the first N layers (0 = all; for tests and benchmarks)");
    app.add_option("--prefill-chunk", f.prefill_chunk,
                   "prompt tokens of one sequence per forward pass (serve: also per step; 0 = the defaults)");
    if (with_dummy) app.add_flag("--dummy-weights", f.dummy_weights, "CUDA: random weights generated on the device");
    f.layout.add_to(app);
}

BackendOptions backend_options(const BackendFlags& f) {
    FS_CHECK(f.threads >= 0, "--threads must be >= 0, got {}", f.threads);
    FS_CHECK(f.layers >= 0, "--layers must be >= 0, got {}", f.layers);
    FS_CHECK(f.prefill_chunk >= 0, "--prefill-chunk must be >= 0, got {}", f.prefill_chunk);
    BackendOptions o;
    o.backend = f.backend;
    o.numerics = f.numerics.empty() ? (f.backend == "cpu" ? Numerics::Exact : Numerics::Release)
                                    : parse_numerics(f.numerics);
    o.threads = f.threads;
    o.layers = f.layers;
    o.dummy_weights = f.dummy_weights;
    o.prefill_chunk = f.prefill_chunk;
    const ParallelLayout layout = f.layout.layout();
    FS_CHECK(layout.ranks() == 1 || f.backend != "cpu", "--tp / --ep: the CPU reference runs the whole model (got {})",
             layout.name());
    o.tp = layout.tp;
    o.ep = layout.ep;
    return o;
}

}  // namespace flashseek::cli
