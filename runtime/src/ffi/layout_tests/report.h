/* The layout test's C side: one "index value" line per check on standard output, which the
 * Rust side reads back and compares with its own offsets and sizes. */
#include <stdio.h>
#define REPORT(index, value) printf("%d %lld\n", (index), (long long)(value))
