// env_switch_on / env_int: defaults, accepted values, and a clear error naming the variable for bad values.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "util/env.h"
#include "util/error.h"

namespace flashseek {
namespace {

constexpr const char* kVar = "FLASHSEEK_TEST_ENV_VALUE";

TEST(Env, SwitchDefaultsOnAndOnlyZeroTurnsItOff) {
    unsetenv(kVar);
    EXPECT_TRUE(env_switch_on(kVar));
    setenv(kVar, "1", 1);
    EXPECT_TRUE(env_switch_on(kVar));
    setenv(kVar, "0", 1);
    EXPECT_FALSE(env_switch_on(kVar));
    unsetenv(kVar);
}

TEST(Env, IntegerSettingReadsValidValuesAndNamesTheVariableOtherwise) {
    unsetenv(kVar);
    EXPECT_EQ(env_int(kVar, 8, 1, 16), 8);
    setenv(kVar, "", 1);
    EXPECT_EQ(env_int(kVar, 8, 1, 16), 8);
    setenv(kVar, "3", 1);
    EXPECT_EQ(env_int(kVar, 8, 1, 16), 3);
    setenv(kVar, "16", 1);
    EXPECT_EQ(env_int(kVar, 8, 1, 16), 16);
    for (const char* bad : {"17", "0", "-2", "abc", "4x", "99999999999999999999"}) {
        setenv(kVar, bad, 1);
        try {
            env_int(kVar, 8, 1, 16);
            ADD_FAILURE() << "accepted '" << bad << "'";
        } catch (const Error& e) {
            const std::string what = e.what();
            EXPECT_NE(what.find(kVar), std::string::npos) << what;
            EXPECT_NE(what.find(bad), std::string::npos) << what;
        }
    }
    unsetenv(kVar);
}

}  // namespace
}  // namespace flashseek
