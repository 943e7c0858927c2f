#include <bspa/bspa.h>
#include <stdio.h>

int main(void) {
  if (bspa_abi_version() != BSPA_ABI_VERSION) return 1;
  printf("%s\n", bspa_build_info());
  return 0;
}
