# Included by llama.cpp's own project() while llama-cpp-python's wheel builds (Makefile LLAMA_CMAKE_ARGS passes it as
# CMAKE_PROJECT_llama.cpp_INCLUDE). llama-cpp-python forces LLAMA_BUILD_COMMON on, but its Python package loads only
# libllama and libggml*: llama.cpp's `common` library and the cpp-httplib it links are 55% of the build's compile
# time and never loaded. Turning them off here leaves libllama / libggml* with the same machine code.
set(LLAMA_BUILD_COMMON OFF CACHE BOOL "llama: build common utils library" FORCE)
