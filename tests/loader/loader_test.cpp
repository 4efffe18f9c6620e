// Loader fault tests: every fake module variant (fake_module.c) lives in its own directory; each
// test points options.module_dir at one and checks what enumeration reports, what dsv4_ctx_create
// returns, and the debug line the loader logs for that candidate.
#include <gtest/gtest.h>
#include <limits.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "dsv4/dsv4.h"

namespace {

std::string module_dir(const char* variant) {
  return std::string(DSV4_FAKE_MODULE_ROOT) + "/" + variant;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Collects every log line the library emits through options.log_fn.
struct LogCapture {
  std::mutex mutex;
  std::vector<std::pair<int32_t, std::string>> lines;

  static void sink(int32_t level, const char* message, void* user_data) {
    auto* self = static_cast<LogCapture*>(user_data);
    std::lock_guard<std::mutex> lock(self->mutex);
    self->lines.emplace_back(level, message ? message : "");
  }

  // The first line that contains every part; "" if none.
  std::string find(const std::vector<std::string>& parts) {
    std::lock_guard<std::mutex> lock(mutex);
    for (const auto& line : lines) {
      bool all = true;
      for (const auto& part : parts) all = all && contains(line.second, part);
      if (all) return line.second;
    }
    return "";
  }

  std::string dump() {
    std::lock_guard<std::mutex> lock(mutex);
    std::string text;
    for (const auto& line : lines)
      text += "  [" + std::to_string(line.first) + "] " + line.second + "\n";
    return text;
  }
};

dsv4_ctx_options make_options(const std::string* dir, LogCapture* log = nullptr) {
  dsv4_ctx_options options;
  EXPECT_EQ(dsv4_ctx_options_init(&options), DSV4_STATUS_OK);
  options.module_dir = dir ? dir->c_str() : nullptr;
  if (log) {
    options.log_level = DSV4_LOG_DEBUG;
    options.log_fn = &LogCapture::sink;
    options.log_user_data = log;
  }
  return options;
}

std::vector<dsv4_backend_info> enumerate(const dsv4_ctx_options* options) {
  int32_t count = -1;
  EXPECT_EQ(dsv4_enumerate_backends(options, nullptr, 0, &count), DSV4_STATUS_OK)
      << dsv4_last_error_message();
  EXPECT_GE(count, 0);
  if (count <= 0) return {};
  std::vector<dsv4_backend_info> infos(static_cast<size_t>(count));
  for (auto& info : infos) {
    std::memset(&info, 0, sizeof(info));
    info.struct_size = sizeof(info);
  }
  int32_t again = -1;
  EXPECT_EQ(dsv4_enumerate_backends(options, infos.data(), count, &again), DSV4_STATUS_OK)
      << dsv4_last_error_message();
  EXPECT_EQ(again, count);
  return infos;
}

std::string describe(const std::vector<dsv4_backend_info>& infos) {
  std::string text;
  for (const auto& info : infos) {
    text += std::string("  name=") + info.name + " available=" + std::to_string(info.available) +
            " score=" + std::to_string(info.score) + " path=" + info.path +
            " status=" + info.status + "\n";
  }
  return text;
}

// The entry whose file is libdsv4-<file_stem>.so inside `dir` (nullptr if absent).
const dsv4_backend_info* find_file(const std::vector<dsv4_backend_info>& infos,
                                   const std::string& dir, const std::string& file_stem) {
  const std::string file = "/libdsv4-" + file_stem + ".so";
  for (const auto& info : infos) {
    const std::string path = info.path;
    if (contains(path, dir) && contains(path, file)) return &info;
  }
  return nullptr;
}

const dsv4_backend_info* find_available(const std::vector<dsv4_backend_info>& infos,
                                        const char* name) {
  for (const auto& info : infos)
    if (info.available && std::strcmp(info.name, name) == 0) return &info;
  return nullptr;
}

// Creates a context for options.backend = name; on success fills *out_info and destroys the ctx.
dsv4_status create_named(dsv4_ctx_options options, const char* name, dsv4_ctx_info* out_info,
                         std::string* message) {
  options.backend = name;
  dsv4_ctx* const sentinel = reinterpret_cast<dsv4_ctx*>(static_cast<uintptr_t>(0x5a5a5a50));
  dsv4_ctx* ctx = sentinel;
  const dsv4_status status = dsv4_ctx_create(&options, &ctx);
  *message = dsv4_last_error_message();
  if (status == DSV4_STATUS_OK) {
    std::memset(out_info, 0, sizeof(*out_info));
    out_info->struct_size = sizeof(*out_info);
    EXPECT_EQ(dsv4_ctx_get_info(ctx, out_info), DSV4_STATUS_OK) << dsv4_last_error_message();
    dsv4_ctx_destroy(ctx);
  } else {
    EXPECT_EQ(ctx, sentinel) << "a failing dsv4_ctx_create wrote *out_ctx";
  }
  return status;
}

// ------------------------------------------------------------------------------------------------
// One variant per case: what enumeration and creation must report.
struct FaultCase {
  const char* variant;                  // directory and file stem suffix: libdsv4-fake_<variant>.so
  bool available;                       // enumeration's verdict
  int32_t score;                        // expected score when available (or probe_zero)
  std::vector<std::string> status_any;  // enumeration status contains one of these
  dsv4_status create_status;            // dsv4_ctx_create with options.backend = "fake_<variant>"
  std::vector<std::string> log_any;     // the candidate's debug line contains one of these
};

void PrintTo(const FaultCase& c, std::ostream* os) { *os << c.variant; }

bool contains_any(const std::string& text, const std::vector<std::string>& parts) {
  for (const auto& part : parts)
    if (contains(text, part)) return true;
  return parts.empty();
}

class LoaderFault : public ::testing::TestWithParam<FaultCase> {};

TEST_P(LoaderFault, EnumerationCreationAndLog) {
  const FaultCase& c = GetParam();
  const std::string dir = module_dir(c.variant);
  const std::string stem = std::string("fake_") + c.variant;
  LogCapture log;
  const dsv4_ctx_options options = make_options(&dir, &log);

  const auto infos = enumerate(&options);
  const dsv4_backend_info* info = find_file(infos, dir, stem);
  ASSERT_NE(info, nullptr) << "module file of " << stem << " not enumerated:\n" << describe(infos);
  EXPECT_EQ(info->available, c.available ? 1 : 0) << describe(infos);
  EXPECT_TRUE(contains_any(info->status, c.status_any))
      << "status \"" << info->status << "\" names none of the expected reasons";
  if (c.available) {
    EXPECT_STREQ(info->name, stem.c_str());
    EXPECT_EQ(info->score, c.score);
    EXPECT_EQ(info->device_type, DSV4_DEVICE_CPU);
    EXPECT_EQ(info->device_count, 1);
    EXPECT_EQ(info->module_abi, 0x00020000u) << "negotiated ABI must be the host's 2.0";
  }

  dsv4_ctx_info ctx_info;
  std::string message;
  const dsv4_status status = create_named(options, stem.c_str(), &ctx_info, &message);
  EXPECT_EQ(status, c.create_status) << dsv4_status_string(status) << ": " << message;
  if (status == DSV4_STATUS_OK) {
    EXPECT_STREQ(ctx_info.backend, stem.c_str());
    EXPECT_TRUE(contains(ctx_info.path, dir)) << ctx_info.path;
    EXPECT_TRUE(contains(ctx_info.reason, "options.backend")) << ctx_info.reason;
  } else {
    EXPECT_FALSE(message.empty());
  }

  // One debug line about this candidate, with a verdict and the reason.
  const std::string file = "libdsv4-" + stem + ".so";
  bool found = false;
  {
    std::lock_guard<std::mutex> lock(log.mutex);
    for (const auto& line : log.lines) {
      if (line.first != DSV4_LOG_DEBUG && line.first != DSV4_LOG_INFO &&
          line.first != DSV4_LOG_WARN)
        continue;
      const std::string& text = line.second;
      if (!contains(text, file) && !contains(text, stem)) continue;
      const bool verdict = c.available
                               ? (contains(text, "selected") || contains(text, "available") ||
                                  contains(text, "rejected") || contains(text, "ok"))
                               : (contains(text, "rejected") || contains(text, "unavailable"));
      if (verdict && contains_any(text, c.log_any)) found = true;
    }
  }
  EXPECT_TRUE(found) << "no log line for " << file
                     << " with a verdict and one of the reasons; log:\n"
                     << log.dump();
}

const std::string kDepFile = DSV4_FAKE_DEP_FILE;

INSTANTIATE_TEST_SUITE_P(
    Variants, LoaderFault,
    ::testing::Values(
        FaultCase{"ok", true, 5, {}, DSV4_STATUS_OK, {"selected"}},
        FaultCase{"no_entry", false, 0, {"entry"}, DSV4_STATUS_NO_BACKEND, {"entry"}},
        FaultCase{
            "abi_major", false, 0, {"ABI major 1 != 2"}, DSV4_STATUS_NO_BACKEND, {"ABI", "major"}},
        FaultCase{"abi_minor_new", true, 5, {}, DSV4_STATUS_OK, {}},
        FaultCase{"probe_zero",
                  false,
                  0,
                  {"fake device absent"},
                  DSV4_STATUS_NO_BACKEND,
                  {"score 0", "score=0"}},
        FaultCase{"ctx_fail", true, 5, {}, DSV4_STATUS_BACKEND_ERROR, {"ctx_create"}},
        FaultCase{
            "iface_small", false, 0, {"size", "small"}, DSV4_STATUS_NO_BACKEND, {"size", "small"}},
        FaultCase{
            "entry_fails", false, 0, {"entry", "ABI"}, DSV4_STATUS_NO_BACKEND, {"entry", "ABI"}},
        FaultCase{"missing_dep",
                  false,
                  0,
                  {kDepFile, "cannot open", "dlopen"},
                  DSV4_STATUS_NO_BACKEND,
                  {kDepFile, "cannot open", "dlopen"}}),
    [](const ::testing::TestParamInfo<FaultCase>& param_info) {
      return std::string(param_info.param.variant);
    });

TEST(Loader, DeviceInfoComesFromTheNamedModule) {
  const std::string dir = module_dir("ok");
  const dsv4_ctx_options options = make_options(&dir);
  dsv4_device_info info;
  std::memset(&info, 0, sizeof(info));
  info.struct_size = sizeof(info);
  ASSERT_EQ(dsv4_get_device_info(&options, "fake_ok", 0, &info), DSV4_STATUS_OK)
      << dsv4_last_error_message();
  EXPECT_STREQ(info.name, "fake_ok device");
  EXPECT_EQ(info.device_type, DSV4_DEVICE_CPU);
  EXPECT_EQ(dsv4_get_device_info(&options, "fake_ok", 1, &info), DSV4_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(dsv4_get_device_info(&options, "fake_missing", 0, &info), DSV4_STATUS_NO_BACKEND);
}

TEST(Loader, ProbeZeroReportsScoreZero) {
  const std::string dir = module_dir("probe_zero");
  const dsv4_ctx_options options = make_options(&dir);
  const auto infos = enumerate(&options);
  const dsv4_backend_info* info = find_file(infos, dir, "fake_probe_zero");
  ASSERT_NE(info, nullptr) << describe(infos);
  EXPECT_EQ(info->available, 0);
  EXPECT_EQ(info->score, 0);
  EXPECT_STREQ(info->name, "fake_probe_zero");
  EXPECT_EQ(info->module_abi, 0x00020000u);
}

TEST(Loader, CtxFailMessageNamesModuleFailure) {
  const std::string dir = module_dir("ctx_fail");
  dsv4_ctx_options options = make_options(&dir);
  options.backend = "fake_ctx_fail";
  dsv4_ctx* ctx = nullptr;
  EXPECT_EQ(dsv4_ctx_create(&options, &ctx), DSV4_STATUS_BACKEND_ERROR);
  EXPECT_EQ(ctx, nullptr);
  const std::string message = dsv4_last_error_message();
  EXPECT_TRUE(contains(message, "ctx_create") || contains(message, "fake ctx_create failure"))
      << message;
}

TEST(Loader, UnknownBackendNameIsNoBackend) {
  dsv4_ctx_options options = make_options(nullptr);
  options.backend = "no_such_backend_xyz";
  dsv4_ctx* ctx = nullptr;
  EXPECT_EQ(dsv4_ctx_create(&options, &ctx), DSV4_STATUS_NO_BACKEND);
  EXPECT_EQ(ctx, nullptr);
  EXPECT_TRUE(contains(dsv4_last_error_message(), "no_such_backend_xyz"))
      << dsv4_last_error_message();
}

TEST(Loader, OkModulePlanIsUnsupported) {
  // A module answers for its own plans: the host propagates its status and message.
  const std::string dir = module_dir("ok");
  dsv4_ctx_options options = make_options(&dir);
  options.backend = "fake_ok";
  dsv4_ctx* ctx = nullptr;
  ASSERT_EQ(dsv4_ctx_create(&options, &ctx), DSV4_STATUS_OK) << dsv4_last_error_message();
  dsv4_plan_options plan_options;
  ASSERT_EQ(dsv4_plan_options_init(&plan_options), DSV4_STATUS_OK);
  dsv4_plan* plan = nullptr;
  EXPECT_EQ(dsv4_plan_create(ctx, &plan_options, &plan), DSV4_STATUS_UNSUPPORTED)
      << dsv4_last_error_message();
  EXPECT_EQ(plan, nullptr);
  dsv4_ctx_destroy(ctx);
}

TEST(Loader, EnumerateCapacitySmallerThanCount) {
  const std::string dir = module_dir("auto");
  const dsv4_ctx_options options = make_options(&dir);
  int32_t count = -1;
  ASSERT_EQ(dsv4_enumerate_backends(&options, nullptr, 0, &count), DSV4_STATUS_OK);
  ASSERT_GE(count, 3) << "the auto directory holds three modules";
  dsv4_backend_info infos[2];
  std::memset(infos, 0xA5, sizeof(infos));
  infos[0].struct_size = sizeof(dsv4_backend_info);
  int32_t again = -1;
  ASSERT_EQ(dsv4_enumerate_backends(&options, infos, 1, &again), DSV4_STATUS_OK);
  EXPECT_EQ(again, count);
  EXPECT_NE(infos[0].path[0], '\0');
  const unsigned char* second = reinterpret_cast<const unsigned char*>(&infos[1]);
  for (size_t i = 0; i < sizeof(dsv4_backend_info); ++i)
    ASSERT_EQ(second[i], 0xA5) << "wrote past capacity at byte " << i;
}

TEST(Loader, AutoPicksHighestScoreAmongDeviceType) {
  const std::string dir = module_dir("auto");
  LogCapture log;
  dsv4_ctx_options options = make_options(&dir, &log);
  options.device.device_type = DSV4_DEVICE_ONEAPI;  // only the fake_auto5 / fake_auto7 serve it
  options.device.device_id = 0;

  const auto infos = enumerate(&options);
  const dsv4_backend_info* auto5 = find_available(infos, "fake_auto5");
  const dsv4_backend_info* auto7 = find_available(infos, "fake_auto7");
  const dsv4_backend_info* cpu9 = find_available(infos, "fake_auto_cpu9");
  ASSERT_TRUE(auto5 && auto7 && cpu9) << describe(infos);
  EXPECT_EQ(auto5->score, 5);
  EXPECT_EQ(auto7->score, 7);
  EXPECT_EQ(cpu9->score, 9);
  EXPECT_EQ(auto7->device_type, DSV4_DEVICE_ONEAPI);
  EXPECT_EQ(cpu9->device_type, DSV4_DEVICE_CPU);

  dsv4_ctx* ctx = nullptr;
  ASSERT_EQ(dsv4_ctx_create(&options, &ctx), DSV4_STATUS_OK) << dsv4_last_error_message();
  dsv4_ctx_info info;
  std::memset(&info, 0, sizeof(info));
  info.struct_size = sizeof(info);
  ASSERT_EQ(dsv4_ctx_get_info(ctx, &info), DSV4_STATUS_OK);
  EXPECT_STREQ(info.backend, "fake_auto7");
  EXPECT_EQ(info.device.device_type, DSV4_DEVICE_ONEAPI);
  EXPECT_TRUE(contains(info.reason, "7"))
      << "reason should give the winning score: " << info.reason;
  dsv4_ctx_destroy(ctx);
  EXPECT_NE(log.find({"fake_auto7", "selected"}), "") << log.dump();
}

TEST(Loader, NoModuleForDeviceTypeIsNoBackend) {
  const std::string dir = module_dir("ok");
  dsv4_ctx_options options = make_options(&dir);
  options.device.device_type = DSV4_DEVICE_ONEAPI;
  dsv4_ctx* ctx = nullptr;
  EXPECT_EQ(dsv4_ctx_create(&options, &ctx), DSV4_STATUS_NO_BACKEND);
  EXPECT_EQ(ctx, nullptr);
  EXPECT_FALSE(std::string(dsv4_last_error_message()).empty());
}

TEST(Loader, CurrentDirectoryIsNeverSearched) {
  char saved[PATH_MAX];
  ASSERT_NE(getcwd(saved, sizeof(saved)), nullptr);
  const std::string dir = module_dir("cwd");
  ASSERT_EQ(chdir(dir.c_str()), 0) << dir;
  const auto infos = enumerate(nullptr);
  dsv4_ctx_options options = make_options(nullptr);
  options.backend = "fake_cwd";
  dsv4_ctx* ctx = nullptr;
  const dsv4_status status = dsv4_ctx_create(&options, &ctx);
  ASSERT_EQ(chdir(saved), 0);
  for (const auto& info : infos) {
    EXPECT_FALSE(contains(info.path, "fake_cwd"))
        << "module in the CWD was enumerated: " << info.path;
    EXPECT_STRNE(info.name, "fake_cwd");
  }
  EXPECT_EQ(status, DSV4_STATUS_NO_BACKEND);
  if (status == DSV4_STATUS_OK) dsv4_ctx_destroy(ctx);
}

// Runs `body` with the current directory set to `dir`, restoring it afterwards.
template <class Body>
void in_directory(const std::string& dir, Body&& body) {
  char saved[PATH_MAX];
  ASSERT_NE(getcwd(saved, sizeof(saved)), nullptr);
  ASSERT_EQ(chdir(dir.c_str()), 0) << dir;
  body();
  ASSERT_EQ(chdir(saved), 0);
}

TEST(Loader, RelativeModuleDirIsRefused) {
  // "." would be the current directory, where fake_cwd lives; "cwd" a directory below the
  // current one. Every entry point refuses both before anything is searched or written.
  in_directory(std::string(DSV4_FAKE_MODULE_ROOT), [] {
    for (const std::string dir : {".", "cwd", "./cwd"}) {
      SCOPED_TRACE("options.module_dir = " + dir);
      const dsv4_ctx_options options = make_options(&dir);
      int32_t count = -7;
      EXPECT_EQ(dsv4_enumerate_backends(&options, nullptr, 0, &count),
                DSV4_STATUS_INVALID_ARGUMENT);
      EXPECT_EQ(count, -7);
      const std::string message = dsv4_last_error_message();
      EXPECT_TRUE(contains(message, "options->module_dir")) << message;
      EXPECT_TRUE(contains(message, "not an absolute path")) << message;

      dsv4_device_info device;
      std::memset(&device, 0x5a, sizeof(device));
      device.struct_size = sizeof(device);
      EXPECT_EQ(dsv4_get_device_info(&options, "fake_cwd", 0, &device),
                DSV4_STATUS_INVALID_ARGUMENT);
      EXPECT_EQ(device.device_id, 0x5a5a5a5a) << "a refused call wrote its output";

      dsv4_ctx_info info;
      std::string create_message;
      EXPECT_EQ(create_named(options, "fake_cwd", &info, &create_message),
                DSV4_STATUS_INVALID_ARGUMENT);
      EXPECT_TRUE(contains(create_message, "options->module_dir")) << create_message;
    }
  });
}

TEST(Loader, ModuleDirShadowsBuiltinCpu) {
  // A module named "cpu" in options.module_dir comes first in search order and hides the real one.
  const std::string dir = module_dir("shadow_cpu");
  LogCapture log;
  const dsv4_ctx_options options = make_options(&dir, &log);
  const auto infos = enumerate(&options);
  const dsv4_backend_info* fake = find_file(infos, dir, "fake_shadow_cpu");
  ASSERT_NE(fake, nullptr) << describe(infos);
  EXPECT_EQ(fake->available, 1) << describe(infos);
  EXPECT_STREQ(fake->name, "cpu");
  for (const auto& info : infos) {
    if (&info == fake || std::strcmp(info.name, "cpu") != 0) continue;
    EXPECT_EQ(info.available, 0) << "second \"cpu\" must be reported shadowed:\n"
                                 << describe(infos);
    EXPECT_TRUE(contains(info.status, "shadow")) << info.status;
  }
  dsv4_ctx_info ctx_info;
  std::string message;
  ASSERT_EQ(create_named(options, "cpu", &ctx_info, &message), DSV4_STATUS_OK) << message;
  EXPECT_TRUE(contains(ctx_info.path, dir)) << ctx_info.path;
}

// ------------------------------------------------------------------------------------------------
// Environment-driven suites: ctest sets the variable (tests/loader/CMakeLists.txt).

TEST(LoaderEnvBackend, EnvSelectsBackend) {
  ASSERT_STREQ(std::getenv("DSV4_BACKEND"), "fake_ok") << "run through ctest (loader_env_backend)";
  const std::string dir = module_dir("ok");
  const dsv4_ctx_options options = make_options(&dir);
  dsv4_ctx* ctx = nullptr;
  ASSERT_EQ(dsv4_ctx_create(&options, &ctx), DSV4_STATUS_OK) << dsv4_last_error_message();
  dsv4_ctx_info info;
  std::memset(&info, 0, sizeof(info));
  info.struct_size = sizeof(info);
  ASSERT_EQ(dsv4_ctx_get_info(ctx, &info), DSV4_STATUS_OK);
  EXPECT_STREQ(info.backend, "fake_ok");
  EXPECT_TRUE(contains(info.reason, "DSV4_BACKEND")) << info.reason;
  dsv4_ctx_destroy(ctx);
}

TEST(LoaderEnvBackend, OptionBeatsEnv) {
  ASSERT_STREQ(std::getenv("DSV4_BACKEND"), "fake_ok") << "run through ctest (loader_env_backend)";
  const std::string dir = module_dir("ok");
  const dsv4_ctx_options options = make_options(&dir);
  dsv4_ctx_info info;
  std::string message;
  ASSERT_EQ(create_named(options, "cpu", &info, &message), DSV4_STATUS_OK) << message;
  EXPECT_STREQ(info.backend, "cpu");
  EXPECT_TRUE(contains(info.reason, "options.backend")) << info.reason;
}

TEST(LoaderEnvBackend, EnvNamingMissingModuleIsNoBackend) {
  ASSERT_STREQ(std::getenv("DSV4_BACKEND"), "fake_ok") << "run through ctest (loader_env_backend)";
  const std::string dir = module_dir("ok7");  // holds fake_ok7 only
  const dsv4_ctx_options options = make_options(&dir);
  dsv4_ctx* ctx = nullptr;
  EXPECT_EQ(dsv4_ctx_create(&options, &ctx), DSV4_STATUS_NO_BACKEND);
  EXPECT_EQ(ctx, nullptr);
  EXPECT_TRUE(contains(dsv4_last_error_message(), "fake_ok")) << dsv4_last_error_message();
}

TEST(LoaderEnvDisable, GlobHidesModule) {
  ASSERT_STREQ(std::getenv("DSV4_BACKEND_DISABLE"), "fake_o*") << "run through ctest";
  for (const char* variant : {"ok", "ok7"}) {
    const std::string dir = module_dir(variant);
    const dsv4_ctx_options options = make_options(&dir);
    const auto infos = enumerate(&options);
    const std::string name = std::string("fake_") + variant;
    EXPECT_EQ(find_available(infos, name.c_str()), nullptr) << describe(infos);
    EXPECT_NE(find_available(infos, "cpu"), nullptr) << "the glob must not hide cpu:\n"
                                                     << describe(infos);
    dsv4_ctx_info info;
    std::string message;
    EXPECT_EQ(create_named(options, name.c_str(), &info, &message), DSV4_STATUS_NO_BACKEND)
        << message;
  }
  // Names the glob does not match stay available.
  const std::string dir = module_dir("auto");
  const dsv4_ctx_options options = make_options(&dir);
  const auto infos = enumerate(&options);
  EXPECT_NE(find_available(infos, "fake_auto7"), nullptr) << describe(infos);
}

TEST(LoaderEnvPath, PathIsSearched) {
  const char* path = std::getenv("DSV4_BACKEND_PATH");
  ASSERT_NE(path, nullptr) << "run through ctest (loader_env_path)";
  const auto infos = enumerate(nullptr);
  const dsv4_backend_info* shadow = find_available(infos, "fake_shadow");
  ASSERT_NE(shadow, nullptr) << describe(infos);
  EXPECT_EQ(shadow->score, 4);
  EXPECT_TRUE(contains(shadow->path, "shadow_b")) << shadow->path;
}

TEST(LoaderEnvPath, ModuleDirComesFirstAndOtherIsShadowed) {
  ASSERT_NE(std::getenv("DSV4_BACKEND_PATH"), nullptr) << "run through ctest (loader_env_path)";
  const std::string dir_a = module_dir("shadow_a");
  const std::string dir_b = module_dir("shadow_b");
  const dsv4_ctx_options options = make_options(&dir_a);
  const auto infos = enumerate(&options);
  const dsv4_backend_info* first = find_file(infos, dir_a, "fake_shadow");
  const dsv4_backend_info* second = find_file(infos, dir_b, "fake_shadow");
  ASSERT_NE(first, nullptr) << describe(infos);
  ASSERT_NE(second, nullptr) << "the shadowed module must still be reported:\n" << describe(infos);
  EXPECT_EQ(first->available, 1);
  EXPECT_EQ(first->score, 3);
  EXPECT_EQ(second->available, 0);
  EXPECT_TRUE(contains(second->status, "shadow")) << second->status;
  dsv4_ctx_info info;
  std::string message;
  ASSERT_EQ(create_named(options, "fake_shadow", &info, &message), DSV4_STATUS_OK) << message;
  EXPECT_TRUE(contains(info.path, dir_a)) << info.path;
}

TEST(LoaderEnvPathRelative, RelativeEntriesAreIgnoredWithAReason) {
  // DSV4_BACKEND_PATH = "cwd:<root>/ok": the relative entry names a real module directory below
  // the current one; it must be skipped with a warning, and the absolute entry still searched.
  const char* path = std::getenv("DSV4_BACKEND_PATH");
  ASSERT_NE(path, nullptr) << "run through ctest (loader_env_path_relative)";
  ASSERT_EQ(std::string(path).rfind("cwd:", 0), 0u) << path;
  in_directory(std::string(DSV4_FAKE_MODULE_ROOT), [] {
    LogCapture log;
    const dsv4_ctx_options options = make_options(nullptr, &log);
    const auto infos = enumerate(&options);
    for (const auto& info : infos) EXPECT_FALSE(contains(info.path, "fake_cwd")) << info.path;
    EXPECT_NE(find_available(infos, "fake_ok"), nullptr) << describe(infos);
    const std::string warning = log.find({"DSV4_BACKEND_PATH", "'cwd'", "not an absolute path"});
    EXPECT_NE(warning, "") << log.dump();
  });
}

TEST(LoaderEnvLogLevel, EnvLevelAppliesWhenOptionsSayMinusOne) {
  ASSERT_STREQ(std::getenv("DSV4_LOG_LEVEL"), "debug")
      << "run through ctest (loader_env_log_level)";
  const std::string dir = module_dir("no_entry");
  LogCapture log;
  dsv4_ctx_options options = make_options(&dir, &log);
  options.log_level = -1;  // use DSV4_LOG_LEVEL
  const auto infos = enumerate(&options);
  dsv4_ctx* ctx = nullptr;
  ASSERT_EQ(dsv4_ctx_create(&options, &ctx), DSV4_STATUS_OK) << dsv4_last_error_message();
  dsv4_ctx_destroy(ctx);
  EXPECT_NE(log.find({"fake_no_entry"}), "") << "debug lines expected from DSV4_LOG_LEVEL:\n"
                                             << log.dump();

  // An explicit level wins over the environment: nothing above WARN gets through.
  LogCapture quiet;
  options.log_user_data = &quiet;
  options.log_level = DSV4_LOG_WARN;
  ASSERT_EQ(dsv4_ctx_create(&options, &ctx), DSV4_STATUS_OK) << dsv4_last_error_message();
  dsv4_ctx_destroy(ctx);
  for (const auto& line : quiet.lines) EXPECT_LE(line.first, DSV4_LOG_WARN) << line.second;
}

}  // namespace
