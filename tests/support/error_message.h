// The message of the flashseek::Error a call throws, for the tests that check an error names what is wrong (a
// field, a tensor, an argument): one helper for every test folder instead of a copy per folder.
#pragma once
#include <functional>
#include <string>

#include "util/error.h"

namespace flashseek::test {

// The message of the flashseek::Error f throws; empty when it throws none.
inline std::string message_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

}  // namespace flashseek::test
