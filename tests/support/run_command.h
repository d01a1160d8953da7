// Running a shell command from a test and collecting its exit status and output: the tests of the `flashseek`
// binary (CLI contracts, goldens, tokenizer tools) and of the Python scripts all go through this one runner.
#pragma once
#include <sys/wait.h>

#include <cstdio>
#include <string>

#include "util/error.h"

namespace flashseek::test_support {

struct CommandResult {
    int exit_code = -1;  // the exit status, or 128 + the signal that ended the command
    std::string output;  // what it wrote to stdout (and stderr, with_stderr)
};

// Runs `command_line` through /bin/sh; with_stderr appends "2>&1" so that errors land in `output`. Throws Error
// naming the command when it cannot be started.
inline CommandResult run_command(const std::string& command_line, bool with_stderr = true) {
    const std::string cmd = with_stderr ? command_line + " 2>&1" : command_line;
    FILE* p = ::popen(cmd.c_str(), "r");
    FS_CHECK(p != nullptr, "cannot run: {}", command_line);
    CommandResult r;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
    const int status = ::pclose(p);
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    return r;
}

// Quotes a path or argument for the shell.
inline std::string shell_quote(const std::string& s) {
    std::string q = "'";
    for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
}

}  // namespace flashseek::test_support
