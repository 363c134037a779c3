# Cross build for aarch64 (Debian's g++-aarch64-linux-gnu and the :arm64 -dev packages installed
# beside the native ones, multiarch). Tests run under qemu-user (make test-arm64).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
# The arm64 libraries and their .pc files; headers are shared in /usr/include (multiarch).
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")
# QEMU_CPU=max (set by make test-arm64) gives the emulated CPU every extension qemu knows (dot
# product, i8mm, bf16, SVE), so every kernel table is testable.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64-static)
