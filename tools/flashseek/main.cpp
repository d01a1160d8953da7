// `flashseek` command-line entry point: dispatches to the registered subcommands and turns errors into a
// message on stderr and a non-zero exit code.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>

#include "backends/builtin.h"
#include "command.h"
#include "util/error.h"

namespace flashseek::cli {
std::vector<Command>& registry() {
    static std::vector<Command> commands;
    return commands;
}
}  // namespace flashseek::cli

static void print_usage() {
    auto cmds = flashseek::cli::registry();
    std::sort(cmds.begin(), cmds.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
    std::fprintf(stderr, "usage: flashseek <command> [options]   (flashseek <command> --help for details)\n\ncommands:\n");
    for (const auto& c : cmds) std::fprintf(stderr, "  %-16s %s\n", c.name.c_str(), c.summary.c_str());
}

int main(int argc, char** argv) {
    if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "help")) {
        print_usage();
        return argc < 2 ? 2 : 0;
    }
    flashseek::register_builtin_backends();
    for (const auto& c : flashseek::cli::registry()) {
        if (c.name != argv[1]) continue;
        try {
            return c.run(argc - 1, argv + 1);
        } catch (const std::exception& e) {
            std::fprintf(stderr, "flashseek %s: error: %s\n", argv[1], e.what());
            return 1;
        }
    }
    std::fprintf(stderr, "flashseek: unknown command '%s'\n\n", argv[1]);
    print_usage();
    return 2;
}
