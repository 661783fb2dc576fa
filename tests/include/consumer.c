/* A program outside the tree, built against an installed crescent with only
 * what pkg-config says (tests/include/test_install.sh). */
#include <crescent/common.h>
#include <crescent/store.h>
#include <crescent/transfer.h>

#include <stdio.h>

int main(void)
{
    const char *v = cr_version();
    const char *e = cr_strerror(-22);
    if (!v || !*v || !e || !*e) {
        fprintf(stderr, "cr_version/cr_strerror returned nothing\n");
        return 1;
    }
    printf("libcrescent %s; cr_strerror(-22) = %s\n", v, e);
    return 0;
}
