# Third-party dependencies: Debian 12 packages only (scripts/setup.sh installs them).
find_package(Threads REQUIRED)
if(VLMD_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
find_package(PkgConfig REQUIRED)
pkg_check_modules(HWY REQUIRED IMPORTED_TARGET libhwy)
pkg_check_modules(HWY_CONTRIB REQUIRED IMPORTED_TARGET libhwy-contrib)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
pkg_check_modules(JPEG REQUIRED IMPORTED_TARGET libjpeg)   # image decoding (libjpeg-turbo)
pkg_check_modules(PNG REQUIRED IMPORTED_TARGET libpng)
pkg_check_modules(WEBP REQUIRED IMPORTED_TARGET libwebp)
find_package(OpenSSL REQUIRED COMPONENTS Crypto SSL)         # SHA-256 (image keys, allowlists); TLS (serve/http)
find_package(nlohmann_json 3.10 REQUIRED)
if(NOT VLMD_BUILD_SERVER)
  return()  # the engine alone: what follows serves HTTP, logs and parses command lines
endif()
find_package(CLI11 REQUIRED)
pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)  # HTTP clients (image URLs, OTLP, tests)
# Boost.Asio + Boost.Beast (header-only): the server's event-driven connection layer and its
# strict HTTP/1.1 parser (serve/http/http_front.cpp, http_connection.cpp).
find_package(Boost 1.81 REQUIRED)
# cpp-httplib listens with a backlog of 5: a burst of more simultaneous connections overflows the
# accept queue, and the dropped handshakes wait for the client's SYN retry (1 s, then 3 s, ...).
# Every translation unit sees the same value (the header's inline functions must not differ).
add_compile_definitions(CPPHTTPLIB_LISTEN_BACKLOG=1024)
find_package(spdlog REQUIRED)                                   # structured server logs
# Redaction (serve/redact): dlib's HOG face detector and OpenCV's cascades (faces, number plates;
# the XML files come with opencv-data). Only the three OpenCV modules used are linked, not the
# whole opencv4.pc list (video I/O, GUI; Debian ships that file only with libopencv-dev, which
# installs every module).
find_path(VLMD_OPENCV_INCLUDE_DIR opencv2/objdetect.hpp PATH_SUFFIXES opencv4 REQUIRED)
foreach(module core imgproc objdetect)
  find_library(VLMD_OPENCV_${module} opencv_${module} REQUIRED)
endforeach()
add_library(vlmd_opencv INTERFACE)
target_include_directories(vlmd_opencv SYSTEM INTERFACE ${VLMD_OPENCV_INCLUDE_DIR})
target_link_libraries(vlmd_opencv INTERFACE ${VLMD_OPENCV_objdetect} ${VLMD_OPENCV_imgproc} ${VLMD_OPENCV_core})
find_package(dlib REQUIRED)
