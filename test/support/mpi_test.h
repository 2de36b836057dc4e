#pragma once
#include "gang.h"

namespace pb::test {
extern Gang* g_gang;  // the world, set up by mpi_test_main.cpp
}
