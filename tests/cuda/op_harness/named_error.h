// The check every "bad arguments" test makes: the call throws flashseek::Error and the message names what is wrong
// (contains `fragment`: a field, a tensor, a variable). A call that is accepted, or that fails another way, is a test
// failure.
#pragma once
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <string_view>

#include "util/error.h"

namespace flashseek::test {

inline void expect_named_error(const std::function<void()>& call, std::string_view fragment) {
    try {
        call();
        ADD_FAILURE() << "accepted; expected an error naming '" << fragment << "'";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
}

}  // namespace flashseek::test
