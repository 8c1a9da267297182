#include "sim/kernel_compiler.h"

#include "metalrt/shader.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <vector>

namespace metalrt::sim {

namespace {
std::mutex g_mutex;

KernelToolchain& Toolchain() {
  static KernelToolchain t = [] {
    KernelToolchain d;
    const char* py = std::getenv("METALRT_SIM_PYTHON");
    d.python = py && *py ? py : "python3";
#ifdef METALRT_SOURCE_DIR
    d.generator = METALRT_SOURCE_DIR "/python/metalrt/_sim/msl_to_cpp.py";
    d.shim_dir = METALRT_SOURCE_DIR "/metal/shim";
#endif
    return d;
  }();
  return t;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// FNV-1a, 64 bits: the cache key (a content hash, not a security boundary).
uint64_t Hash(const std::string& data, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : data) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string Quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Runs a shell command; returns its exit status and combined output.
int Run(const std::string& command, std::string& output) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (!pipe) throw std::runtime_error("[compile_library] cannot run: " + command);
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) output.append(buffer, n);
  return pclose(pipe);
}

void MakeDirs(const std::string& path) {
  for (size_t i = 1; i <= path.size(); ++i)
    if (i == path.size() || path[i] == '/') mkdir(path.substr(0, i).c_str(), 0755);
}

std::string CacheDir() {
  if (const char* dir = std::getenv("METALRT_CACHE_DIR"); dir && *dir)
    return std::string(dir) + "/kernels";
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : "/tmp") + "/.cache/metalrt/kernels";
}

// Names and contents of the files of `dir` whose names end with `suffix`, sorted.
std::string DirContents(const std::string& dir, const std::string& suffix = "") {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string n = e->d_name;
      if (n[0] != '.' && n.size() >= suffix.size() &&
          n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0)
        names.push_back(n);
    }
    closedir(d);
  }
  std::sort(names.begin(), names.end());
  std::string all;
  for (const auto& n : names) all += n + '\0' + ReadFile(dir + "/" + n);
  return all;
}

bool Exists(const std::string& path) { return access(path.c_str(), R_OK) == 0; }
}  // namespace

void SetKernelToolchain(const KernelToolchain& toolchain) {
  std::lock_guard<std::mutex> lock(g_mutex);
  Toolchain() = toolchain;
}

KernelToolchain GetKernelToolchain() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return Toolchain();
}

KernelModule BuildKernelModule(const std::string& source) {
  const KernelToolchain tc = GetKernelToolchain();
  if (tc.generator.empty() || !Exists(tc.generator) || !Exists(tc.shim_dir + "/sim_module.h"))
    throw std::runtime_error("[compile_library] the MSL generator or shim headers are missing ('" +
                             tc.generator + "', '" + tc.shim_dir + "')");
  const char* cxx_env = std::getenv("CXX");
  const std::string cxx = cxx_env && *cxx_env ? cxx_env : "c++";
  // After $CXX's own words, so -fsigned-char (MSL char is signed; the shim asserts
  // it) wins over a compiler or wrapper that defaults to unsigned char.
  std::string flags = "-std=c++17 -O2 -fsigned-char -fPIC -shared -fvisibility=hidden -Wno-attributes";
#if defined(__linux__)
  // A libstdc++ the compiler links statically stays private to the module (see the
  // extension's link options in CMakeLists.txt).
  flags += " -Wl,--exclude-libs,ALL";
#endif
  uint64_t h = Hash(source);
  // The generator imports its sibling modules: all of them are part of the key.
  h = Hash(DirContents(tc.generator.substr(0, tc.generator.find_last_of('/')), ".py"), h);
  h = Hash(DirContents(tc.shim_dir), h);
  h = Hash(cxx + flags, h);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  const std::string dir = CacheDir() + "/" + hex;
  const std::string module = dir + "/module.so";
  const std::string reflection = dir + "/reflection.json";
  // The reflection is written before the module: a key directory with a module has both.
  if (Exists(module)) return {module, ReadFile(reflection)};

  // Built in a scratch directory of its own, renamed to the key's when complete, so a
  // failed or interrupted build leaves nothing under the key for a later run to trust
  // or trip on (the scratch directory is removed on every way out).
  MakeDirs(CacheDir());
  std::string scratch = dir + ".build-XXXXXX";
  if (mkdtemp(scratch.data()) == nullptr)
    throw std::runtime_error("[compile_library] cannot create a build directory in " + CacheDir() +
                             ": " + std::strerror(errno));
  struct RemoveScratch {
    const std::string& path;
    ~RemoveScratch() {
      std::error_code ignored;
      std::filesystem::remove_all(path, ignored);
    }
  } remove_scratch{scratch};
  const std::string metal = scratch + "/shader.metal";
  const std::string cpp = scratch + "/shader.cpp";
  const std::string reflected = scratch + "/reflection.json";
  {
    std::ofstream out(metal, std::ios::binary);
    out << source;
  }
  std::string output;
  if (Run(Quote(tc.python) + " " + Quote(tc.generator) + " " + Quote(metal) + " " + Quote(cpp) +
              " --mode shared --reflection " + Quote(reflected),
          output) != 0)
    throw std::runtime_error("[compile_library] " + output);
  const std::string built = scratch + "/module.so";
  output.clear();
  // $CXX is a command line (`ccache g++`), as make and the generator's preprocessor
  // (msl_preprocess.compiler) read it: not quoted.
  if (Run(cxx + " " + flags + " -I" + Quote(tc.shim_dir) + " " + Quote(cpp) + " -o " +
              Quote(built),
          output) != 0)
    throw std::runtime_error("[compile_library] compiling the kernel failed:\n" + output);
  std::remove(cpp.c_str());
  // Atomic: of concurrent builders the first rename wins and the others find its
  // module. A key directory without a module (left by a build before scratch
  // directories) is removed and the rename retried.
  if (std::rename(scratch.c_str(), dir.c_str()) != 0 && !Exists(module)) {
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
    if (std::rename(scratch.c_str(), dir.c_str()) != 0 && !Exists(module))
      throw std::runtime_error("[compile_library] cannot move the built kernel to " + dir + ": " +
                               std::strerror(errno));
  }
  return {module, ReadFile(reflection)};
}

}  // namespace metalrt::sim

namespace metalrt {

// metalrt/shader.h: the public name of the toolchain setting.
void SetShaderToolchain(const std::string& python, const std::string& generator,
                        const std::string& shim_dir) {
  sim::SetKernelToolchain({python, generator, shim_dir});
}

}  // namespace metalrt
