// Subcommands of the `flashseek` binary register themselves here; each lives in its own cmd_<name>.cpp.
#pragma once
#include <functional>
#include <string>
#include <vector>

namespace flashseek::cli {

struct Command {
    std::string name;
    std::string summary;
    std::function<int(int argc, char** argv)> run;  // argv[0] is the subcommand name
};

std::vector<Command>& registry();

struct CommandRegistrar {
    explicit CommandRegistrar(Command c) { registry().push_back(std::move(c)); }
};

}  // namespace flashseek::cli

#define FLASHSEEK_CONCAT_(a, b) a##b
#define FLASHSEEK_CONCAT(a, b) FLASHSEEK_CONCAT_(a, b)
// FLASHSEEK_COMMAND("logits", "one-line summary", function)
#define FLASHSEEK_COMMAND(name, summary, fn) \
    static ::flashseek::cli::CommandRegistrar FLASHSEEK_CONCAT(flashseek_cmd_, __LINE__)({name, summary, fn})
