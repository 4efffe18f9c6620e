// The Level Zero test device: tensors in USM device memory of Level Zero GPU 0 (or
// DSV4_TEST_LEVEL_ZERO_DEVICE, the Level Zero module's device_id), one command list as the stream;
// synchronize() executes what was appended on a queue and waits. Every error throws.
#include <level_zero/ze_api.h>

#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "test_device.h"

namespace dsv4test {
namespace {

void check(ze_result_t r, const char* what) {
  if (r != ZE_RESULT_SUCCESS)
    throw std::runtime_error(std::string(what) + ": Level Zero error " +
                             std::to_string(static_cast<unsigned>(r)));
}

class LevelZeroTestDevice final : public TestDevice {
 public:
  LevelZeroTestDevice(ze_driver_handle_t driver, ze_device_handle_t device, int index)
      : device_(device), index_(index) {
    ze_context_desc_t cd{};
    cd.stype = ZE_STRUCTURE_TYPE_CONTEXT_DESC;
    check(zeContextCreate(driver, &cd, &ctx_), "zeContextCreate");
    ze_command_queue_desc_t qd{};
    qd.stype = ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC;
    check(zeCommandQueueCreate(ctx_, device_, &qd, &queue_), "zeCommandQueueCreate");
    ze_command_list_desc_t ld{};
    ld.stype = ZE_STRUCTURE_TYPE_COMMAND_LIST_DESC;
    check(zeCommandListCreate(ctx_, device_, &ld, &list_), "zeCommandListCreate");
  }
  ~LevelZeroTestDevice() override {
    zeCommandListDestroy(list_);
    zeCommandQueueDestroy(queue_);
    zeContextDestroy(ctx_);
  }
  LevelZeroTestDevice(const LevelZeroTestDevice&) = delete;
  LevelZeroTestDevice& operator=(const LevelZeroTestDevice&) = delete;

  dsv4_device device() const override { return dsv4_device{DSV4_DEVICE_ONEAPI, index_}; }
  const char* backend() const override { return "level-zero"; }
  void* alloc(size_t bytes) override {
    ze_device_mem_alloc_desc_t d{};
    d.stype = ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC;
    void* p = nullptr;
    check(zeMemAllocDevice(ctx_, &d, bytes == 0 ? 1 : bytes, 128, device_, &p), "zeMemAllocDevice");
    return p;
  }
  void free(void* p) override {
    if (p == nullptr) return;
    synchronize();
    zeMemFree(ctx_, p);
  }
  void upload(void* dst, const void* src, size_t bytes) override { copy(dst, src, bytes); }
  void download(void* dst, const void* src, size_t bytes) override { copy(dst, src, bytes); }
  void fill(void* dst, unsigned char byte, size_t bytes) override {
    if (bytes == 0) return;
    synchronize();
    check(zeCommandListAppendMemoryFill(list_, dst, &byte, 1, bytes, nullptr, 0, nullptr), "fill");
    synchronize();
  }
  void* stream() override { return list_; }
  // Executes everything appended to the list so far (by the test or by libdsv4) and waits.
  void synchronize() override {
    check(zeCommandListClose(list_), "zeCommandListClose");
    check(zeCommandQueueExecuteCommandLists(queue_, 1, &list_, nullptr), "execute");
    check(zeCommandQueueSynchronize(queue_, UINT64_MAX), "zeCommandQueueSynchronize");
    check(zeCommandListReset(list_), "zeCommandListReset");
  }

 private:
  void copy(void* dst, const void* src, size_t bytes) {
    if (bytes == 0) return;
    synchronize();
    check(zeCommandListAppendMemoryCopy(list_, dst, src, bytes, nullptr, 0, nullptr), "copy");
    synchronize();
  }
  ze_device_handle_t device_;
  int index_;
  ze_context_handle_t ctx_ = nullptr;
  ze_command_queue_handle_t queue_ = nullptr;
  ze_command_list_handle_t list_ = nullptr;
};

}  // namespace

std::unique_ptr<TestDevice> make_level_zero_test_device(std::string* why) {
  try {
    check(zeInit(ZE_INIT_FLAG_GPU_ONLY), "zeInit");
    uint32_t nd = 0;
    check(zeDriverGet(&nd, nullptr), "zeDriverGet");
    std::vector<ze_driver_handle_t> drivers(nd);
    check(zeDriverGet(&nd, drivers.data()), "zeDriverGet");
    int want = 0;
    if (const char* env = std::getenv("DSV4_TEST_LEVEL_ZERO_DEVICE")) want = std::atoi(env);
    int seen = 0;
    for (ze_driver_handle_t drv : drivers) {  // GPUs over all drivers: the module's order
      uint32_t n = 0;
      zeDeviceGet(drv, &n, nullptr);
      std::vector<ze_device_handle_t> devs(n);
      zeDeviceGet(drv, &n, devs.data());
      for (ze_device_handle_t d : devs) {
        ze_device_properties_t p{};
        p.stype = ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES;
        if (zeDeviceGetProperties(d, &p) != ZE_RESULT_SUCCESS || p.type != ZE_DEVICE_TYPE_GPU)
          continue;
        if (seen++ == want) return std::make_unique<LevelZeroTestDevice>(drv, d, want);
      }
    }
    if (why != nullptr) *why = "no Level Zero GPU " + std::to_string(want);
  } catch (const std::exception& e) {
    if (why != nullptr) *why = e.what();
  }
  return nullptr;
}

}  // namespace dsv4test
