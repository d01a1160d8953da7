// Sets an environment variable for one scope and restores it (tests of options read from the environment, such as
// the CUDA backend's kernel policy, KernelPolicy::from_env).
#pragma once
#include <cstdlib>
#include <string>

namespace flashseek::test_support {

class ScopedEnv {
public:
    ScopedEnv(const char* name, const char* value) : name_(name) {
        if (const char* old = std::getenv(name)) old_ = old, had_ = true;
        setenv(name, value, 1);
    }
    ~ScopedEnv() {
        if (had_) setenv(name_, old_.c_str(), 1);
        else unsetenv(name_);
    }
    ScopedEnv(const ScopedEnv&) = delete;
    ScopedEnv& operator=(const ScopedEnv&) = delete;

private:
    const char* name_;
    std::string old_;
    bool had_ = false;
};

}  // namespace flashseek::test_support
