// A C++ program using the public API through libcrescent.so: the headers'
// extern "C" blocks give unmangled names the shared library exports (only
// cr_* leave it, under its version script).
#include <crescent/common.h>
#include <crescent/conductor.h>
#include <crescent/store.h>
#include <crescent/transfer.h>

#include <cstdio>
#include <cstring>

int main()
{
    const char *v = cr_version();
    const char *e = cr_strerror(-22);
    if (!v || !*v || !e || !*e) {
        std::fprintf(stderr, "cr_version/cr_strerror returned nothing\n");
        return 1;
    }
    std::printf("libcrescent %s from C++; cr_strerror(-22) = %s\n", v, e);
    return 0;
}
