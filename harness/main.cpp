#include <cstdio>
int main() { std::puts("prefill-bench: under construction"); return 1; }
