// Linked into the serve test binary only in AddressSanitizer builds (tests/CMakeLists.txt):
// LeakSanitizer's exit scan crashes on OpenCV's TBB runtime in some runs, after every test
// passed; the address checks stay on.
extern "C" const char* __asan_default_options() { return "detect_leaks=0"; }
