// The device-side glue of mcu-npu programs for ExecuTorch's own runtime on the host.
//
// Registers the backends `EthosUBackend` and `NeutronBackend` and, on request, kernels under
// any operator name. Each backend does what its device runtime does with the delegate's
// buffers (the rules of mcu_npu/device/delegate_io.py):
//   - Ethos-U: per NPU input record, the tensor's element type must match the record's element
//     size, its bytes are copied as they lie into the NPU's scratch area at the record's
//     offset and the element counts must match; after the NPU, each output's bytes are copied
//     back when the byte counts match.
//   - Neutron: per NPU input (through the payload's input map) and output (after the input
//     arguments, through the output map): with the format flag set and more than one channel,
//     a contiguous tensor is transposed to channels last (outputs back), a channels-last one
//     is used in place, other dim orders and ranks below 3 are refused; without the flag the
//     tensor must be contiguous and is used in place.
// Only the NPU's compute is handed to the host (a callback), as are the kernels' bodies.
// The payload's I/O description comes from the host at init (it parses the payload formats).

#include <executorch/runtime/backend/interface.h>
#include <executorch/runtime/core/error.h>
#include <executorch/runtime/core/evalue.h>
#include <executorch/runtime/core/exec_aten/util/dim_order_util.h>
#include <executorch/runtime/kernel/kernel_runtime_context.h>
#include <executorch/runtime/kernel/operator_registry.h>

#include <array>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <string>
#include <utility>
#include <vector>

using executorch::aten::ScalarType;
using executorch::aten::Tensor;
using executorch::runtime::ArrayRef;
using executorch::runtime::Backend;
using executorch::runtime::BackendExecutionContext;
using executorch::runtime::BackendInitContext;
using executorch::runtime::BackendInterface;
using executorch::runtime::CompileSpec;
using executorch::runtime::DelegateHandle;
using executorch::runtime::Error;
using executorch::runtime::EValue;
using executorch::runtime::FreeableBuffer;
using executorch::runtime::Kernel;
using executorch::runtime::KernelRuntimeContext;
using executorch::runtime::Result;
using executorch::runtime::Span;
using executorch::runtime::Tag;

namespace {

constexpr int kMaxDims = 16;
constexpr int kDescCapacity = 4096;
constexpr int kKernelSlots = 128;
constexpr int kEthosU = 0;
constexpr int kNeutron = 1;

// One kernel argument as the host reads it.
struct HostArg {
  int32_t tag;  // executorch::runtime::Tag
  int32_t scalar_type;
  int32_t dim;  // tensor rank, or list length
  int32_t reserved;
  int64_t int_value;
  double double_value;
  void* data;  // tensor memory, or the list's items
  int64_t nbytes;
  int64_t sizes[kMaxDims];
  int64_t dim_order[kMaxDims];
};

// Host callbacks. `describe` fills the payload's I/O description and returns a handle id
// (negative: refused); `npu` runs the NPU on its input and output regions (0: done).
using DescribeFn = int (*)(int kind, const void* data, int64_t size, int64_t* desc,
                           int64_t capacity);
using NpuFn = int (*)(int handle, int n_in, void** in_ptrs, const int64_t* in_bytes,
                      int n_out, void** out_ptrs, const int64_t* out_bytes);
using ReleaseFn = void (*)(int handle);
using KernelFn = int (*)(int slot, int n_args, HostArg* args);

DescribeFn g_describe = nullptr;
NpuFn g_npu = nullptr;
ReleaseFn g_release = nullptr;
KernelFn g_kernel = nullptr;
std::string g_last_error;

Error refuse(const char* format, ...) {
  char message[512];
  va_list args;
  va_start(args, format);
  std::vsnprintf(message, sizeof(message), format, args);
  va_end(args);
  g_last_error = message;
  return Error::InvalidProgram;
}

struct Handle {
  int kind;
  int host_handle;
  std::vector<int64_t> desc;
  std::vector<char> scratch;  // Ethos-U: the NPU's scratch area (inputs and outputs)
};

int64_t element_count(const Tensor& t) {
  int64_t n = 1;
  for (ssize_t i = 0; i < t.dim(); i++) {
    n *= t.size(i);
  }
  return n;
}

// The element sizes the Ethos-U runtime copies for each tensor type.
bool ethos_u_copies(ScalarType type, int64_t elem_size) {
  switch (type) {
    case ScalarType::Int:
      return elem_size == 4;
    case ScalarType::Char:
    case ScalarType::Byte:
    case ScalarType::Bool:
      return elem_size == 1;
    case ScalarType::Short:
      return elem_size == 2;
    default:
      return false;
  }
}

// (N, C, H, W) over the last three dims, N the product of the leading ones.
void nchw_of(const Tensor& t, size_t* n, size_t* c, size_t* h, size_t* w) {
  const ssize_t rank = t.dim();
  *n = 1;
  for (ssize_t i = 0; i < rank - 3; i++) {
    *n *= t.size(i);
  }
  *c = t.size(rank - 3);
  *h = t.size(rank - 2);
  *w = t.size(rank - 1);
}

// Reorders `(N, C, H, W)` elements to `(N, H, W, C)` (to_channels_last) or back.
void reorder(const char* src, char* dst, const Tensor& t, bool to_channels_last) {
  size_t n, c, h, w;
  nchw_of(t, &n, &c, &h, &w);
  const size_t e = t.element_size();
  for (size_t in = 0; in < n; in++) {
    for (size_t ic = 0; ic < c; ic++) {
      for (size_t ih = 0; ih < h; ih++) {
        for (size_t iw = 0; iw < w; iw++) {
          const size_t first = ((in * c + ic) * h + ih) * w + iw;
          const size_t last = ((in * h + ih) * w + iw) * c + ic;
          const size_t from = to_channels_last ? first : last;
          const size_t to = to_channels_last ? last : first;
          std::memcpy(dst + to * e, src + from * e, e);
        }
      }
    }
  }
}

bool several_channels(const Tensor& t) {
  return t.dim() < 3 || t.size(t.dim() - 3) != 1;
}

class HostNpuBackend : public BackendInterface {
 public:
  explicit HostNpuBackend(int kind) : kind_(kind) {}

  bool is_available() const override {
    return g_describe != nullptr && g_npu != nullptr;
  }

  Result<DelegateHandle*> init(BackendInitContext& context, FreeableBuffer* processed,
                               ArrayRef<CompileSpec> compile_specs) const override {
    (void)context;
    (void)compile_specs;
    auto* handle = new Handle{kind_, -1, std::vector<int64_t>(kDescCapacity, 0), {}};
    handle->host_handle =
        g_describe(kind_, processed->data(), static_cast<int64_t>(processed->size()),
                   handle->desc.data(), kDescCapacity);
    if (handle->host_handle < 0) {
      delete handle;
      if (g_last_error.empty()) {
        g_last_error = "the host could not read the delegate payload";
      }
      return Error::InvalidProgram;
    }
    if (kind_ == kEthosU) {
      handle->scratch.assign(static_cast<size_t>(handle->desc[2]), 0);
    }
    return handle;
  }

  Error execute(BackendExecutionContext& context, DelegateHandle* opaque,
                Span<EValue*> args) const override {
    (void)context;
    auto* handle = static_cast<Handle*>(opaque);
    g_last_error.clear();
    if (g_npu == nullptr) {  // the host detached its callbacks (interpreter exit)
      return refuse("the host's NPU callback is detached: the interpreter is exiting");
    }
    return kind_ == kEthosU ? execute_ethos_u(*handle, args) : execute_neutron(*handle, args);
  }

  void destroy(DelegateHandle* opaque) const override {
    auto* handle = static_cast<Handle*>(opaque);
    if (handle == nullptr) {
      return;
    }
    if (g_release != nullptr) {
      g_release(handle->host_handle);
    }
    delete handle;
  }

 private:
  // desc: n_in, n_out, scratch size, then per input and per output: element size, offset,
  // element count.
  static Error execute_ethos_u(Handle& handle, Span<EValue*> args) {
    const int64_t* d = handle.desc.data();
    const int n_in = static_cast<int>(d[0]), n_out = static_cast<int>(d[1]);
    const int64_t scratch_size = d[2];
    const int64_t* record = d + 3;
    if (static_cast<int64_t>(args.size()) < n_in + n_out) {
      return refuse("Ethos-U: the payload has %d inputs and %d outputs, the call passes %zu "
                    "arguments", n_in, n_out, args.size());
    }
    char* scratch = handle.scratch.data();
    std::vector<void*> in_ptrs(n_in), out_ptrs(n_out);
    std::vector<int64_t> in_bytes(n_in), out_bytes(n_out);
    for (int i = 0; i < n_in; i++, record += 3) {
      const int64_t elem_size = record[0], offset = record[1], count = record[2];
      if (!args[i]->isTensor()) {
        return refuse("Ethos-U input %d is not a tensor", i);
      }
      const Tensor t = args[i]->toTensor();
      if (!ethos_u_copies(t.scalar_type(), elem_size)) {
        return refuse("Ethos-U input %d: ScalarType %d for a %lld-byte NPU input; the runtime "
                      "copies only int32 (4 bytes), int8/uint8/bool (1 byte) and int16 (2 "
                      "bytes) tensors", i, static_cast<int>(t.scalar_type()),
                      static_cast<long long>(elem_size));
      }
      if (offset < 0 || offset + static_cast<int64_t>(t.nbytes()) > scratch_size ||
          offset + count * elem_size > scratch_size) {
        return refuse("Ethos-U input %d does not fit the NPU scratch area", i);
      }
      std::memcpy(scratch + offset, t.const_data_ptr(), t.nbytes());
      if (element_count(t) != count) {
        return refuse("Ethos-U input %d: the program passes %lld elements, the NPU expects "
                      "%lld (Input tensor sizes do not match)", i,
                      static_cast<long long>(element_count(t)),
                      static_cast<long long>(count));
      }
      in_ptrs[i] = scratch + offset;
      in_bytes[i] = count * elem_size;
    }
    const int64_t* output_records = record;
    for (int i = 0; i < n_out; i++, record += 3) {
      const int64_t elem_size = record[0], offset = record[1], count = record[2];
      if (offset < 0 || offset + count * elem_size > scratch_size) {
        return refuse("Ethos-U output %d does not fit the NPU scratch area", i);
      }
      out_ptrs[i] = scratch + offset;
      out_bytes[i] = count * elem_size;
    }
    if (g_npu(handle.host_handle, n_in, in_ptrs.data(), in_bytes.data(), n_out,
              out_ptrs.data(), out_bytes.data()) != 0) {
      return Error::InvalidProgram;
    }
    record = output_records;
    for (int i = 0; i < n_out; i++, record += 3) {
      if (!args[n_in + i]->isTensor()) {
        return refuse("Ethos-U output %d is not a tensor", i);
      }
      Tensor t = args[n_in + i]->toTensor();
      if (static_cast<int64_t>(t.nbytes()) != out_bytes[i]) {
        return refuse("Ethos-U output %d: the program's tensor is %zu bytes, the NPU writes "
                      "%lld; the runtime would re-chunk the data, which this program does "
                      "not call for", i, t.nbytes(), static_cast<long long>(out_bytes[i]));
      }
      std::memcpy(t.mutable_data_ptr(), out_ptrs[i], t.nbytes());
    }
    return Error::Ok;
  }

  // desc: n_in, n_out, n_input_args, input flags, output flags, input map, output map.
  static Error execute_neutron(Handle& handle, Span<EValue*> args) {
    const int64_t* d = handle.desc.data();
    const int n_in = static_cast<int>(d[0]), n_out = static_cast<int>(d[1]);
    const int64_t n_args = d[2];
    const int64_t* in_flags = d + 3;
    const int64_t* out_flags = in_flags + n_in;
    const int64_t* in_map = out_flags + n_out;
    const int64_t* out_map = in_map + n_in;
    std::vector<std::vector<char>> buffers;
    buffers.reserve(n_in + n_out);
    std::vector<void*> in_ptrs(n_in), out_ptrs(n_out);
    std::vector<int64_t> in_bytes(n_in), out_bytes(n_out);
    for (int i = 0; i < n_in; i++) {
      if (in_map[i] >= static_cast<int64_t>(args.size()) || !args[in_map[i]]->isTensor()) {
        return refuse("Neutron input %d maps to argument %lld, which is no tensor of the call",
                      i, static_cast<long long>(in_map[i]));
      }
      const Tensor t = args[in_map[i]]->toTensor();
      const auto* order = t.dim_order().data();
      in_bytes[i] = t.nbytes();
      if (in_flags[i] && several_channels(t)) {
        if (t.dim() < 3) {
          return refuse("Neutron input %d: the runtime cannot transpose a %zd-D tensor to "
                        "channels last (format flag set, rank below 3)", i, t.dim());
        }
        if (executorch::runtime::is_channels_last_dim_order(order, t.dim())) {
          in_ptrs[i] = const_cast<void*>(t.const_data_ptr());
        } else if (executorch::runtime::is_contiguous_dim_order(order, t.dim())) {
          buffers.emplace_back(t.nbytes());
          reorder(static_cast<const char*>(t.const_data_ptr()), buffers.back().data(), t,
                  true);
          in_ptrs[i] = buffers.back().data();
        } else {
          return refuse("Neutron input %d: the runtime refuses its dim order (format flag "
                        "set: contiguous or channels last only)", i);
        }
      } else {
        if (!executorch::runtime::is_contiguous_dim_order(order, t.dim())) {
          return refuse("Neutron input %d: the runtime expects a contiguous dim order here", i);
        }
        in_ptrs[i] = const_cast<void*>(t.const_data_ptr());
      }
    }
    for (int i = 0; i < n_out; i++) {
      const int64_t at = n_args + out_map[i];
      if (at >= static_cast<int64_t>(args.size()) || !args[at]->isTensor()) {
        return refuse("Neutron output %d maps to argument %lld, past the call's", i,
                      static_cast<long long>(at));
      }
      Tensor t = args[at]->toTensor();
      const auto* order = t.dim_order().data();
      out_bytes[i] = t.nbytes();
      if (out_flags[i] && several_channels(t)) {
        if (executorch::runtime::is_channels_last_dim_order(order, t.dim())) {
          out_ptrs[i] = t.mutable_data_ptr();
        } else if (executorch::runtime::is_contiguous_dim_order(order, t.dim())) {
          buffers.emplace_back(t.nbytes());
          out_ptrs[i] = buffers.back().data();
        } else {
          return refuse("Neutron output %d: the runtime refuses its dim order", i);
        }
      } else {
        if (!executorch::runtime::is_contiguous_dim_order(order, t.dim())) {
          return refuse("Neutron output %d: the runtime expects a contiguous dim order here",
                        i);
        }
        out_ptrs[i] = t.mutable_data_ptr();
      }
    }
    if (g_npu(handle.host_handle, n_in, in_ptrs.data(), in_bytes.data(), n_out,
              out_ptrs.data(), out_bytes.data()) != 0) {
      return Error::InvalidProgram;
    }
    for (int i = 0; i < n_out; i++) {
      Tensor t = args[n_args + out_map[i]]->toTensor();
      if (!(out_flags[i] && several_channels(t))) {
        continue;
      }
      if (t.dim() < 3) {
        return refuse("Neutron output %d: the runtime cannot transpose a %zd-D output to "
                      "channels first", i, t.dim());
      }
      if (executorch::runtime::is_contiguous_dim_order(t.dim_order().data(), t.dim())) {
        reorder(static_cast<const char*>(out_ptrs[i]), static_cast<char*>(t.mutable_data_ptr()),
                t, false);
      }
    }
    return Error::Ok;
  }

  int kind_;
};

HostNpuBackend g_ethos_u(kEthosU);
HostNpuBackend g_neutron(kNeutron);
Backend g_backends[] = {{"EthosUBackend", &g_ethos_u}, {"NeutronBackend", &g_neutron}};
bool g_backends_registered = false;

bool marshal_tensor(const Tensor& t, HostArg* out, int index) {
  if (t.dim() > kMaxDims) {
    g_last_error = "kernel argument " + std::to_string(index) + " has more than " +
        std::to_string(kMaxDims) + " dims";
    return false;
  }
  out->tag = static_cast<int32_t>(Tag::Tensor);
  out->scalar_type = static_cast<int32_t>(t.scalar_type());
  out->dim = static_cast<int32_t>(t.dim());
  out->data = t.mutable_data_ptr();
  out->nbytes = static_cast<int64_t>(t.nbytes());
  for (ssize_t i = 0; i < t.dim(); i++) {
    out->sizes[i] = t.size(i);
    out->dim_order[i] = t.dim_order()[i];
  }
  return true;
}

// A kernel argument for the host; false (with the reason kept) when it has no host form.
// The items of a tensor list are marshalled into a block of `nested`, which `data` points to.
bool marshal(const EValue& value, HostArg* out, int index,
             std::deque<std::vector<HostArg>>& nested) {
  std::memset(out, 0, sizeof(HostArg));
  out->tag = static_cast<int32_t>(value.tag);
  switch (value.tag) {
    case Tag::None:
      return true;
    case Tag::Int:
      out->int_value = value.toInt();
      return true;
    case Tag::Double:
      out->double_value = value.toDouble();
      return true;
    case Tag::Bool:
      out->int_value = value.toBool() ? 1 : 0;
      return true;
    case Tag::ListInt: {
      auto items = value.toIntList();
      out->dim = static_cast<int32_t>(items.size());
      out->data = const_cast<int64_t*>(items.data());
      return true;
    }
    case Tag::ListBool: {
      auto items = value.toBoolList();
      out->dim = static_cast<int32_t>(items.size());
      out->data = const_cast<bool*>(items.data());
      return true;
    }
    case Tag::ListDouble: {
      auto items = value.toDoubleList();
      out->dim = static_cast<int32_t>(items.size());
      out->data = const_cast<double*>(items.data());
      return true;
    }
    case Tag::ListTensor: {
      auto items = value.toTensorList();
      nested.emplace_back(items.size());
      for (size_t i = 0; i < items.size(); i++) {
        if (!marshal_tensor(items[i], &nested.back()[i], index)) {
          return false;
        }
      }
      out->dim = static_cast<int32_t>(items.size());
      out->data = nested.back().data();
      return true;
    }
    case Tag::ListOptionalTensor: {
      auto items = value.toListOptionalTensor();
      nested.emplace_back(items.size());
      for (size_t i = 0; i < items.size(); i++) {
        HostArg* item = &nested.back()[i];
        std::memset(item, 0, sizeof(HostArg));
        item->tag = static_cast<int32_t>(Tag::None);
        if (items[i].has_value() && !marshal_tensor(items[i].value(), item, index)) {
          return false;
        }
      }
      out->dim = static_cast<int32_t>(items.size());
      out->data = nested.back().data();
      return true;
    }
    case Tag::Tensor:
      return marshal_tensor(value.toTensor(), out, index);
    default:
      g_last_error = "kernel argument " + std::to_string(index) +
          " has an EValue type the host does not take (tag " +
          std::to_string(static_cast<int>(value.tag)) + ")";
      return false;
  }
}

void run_kernel(int slot, KernelRuntimeContext& context, Span<EValue*> args) {
  std::vector<HostArg> host(args.size());
  std::deque<std::vector<HostArg>> nested;
  for (size_t i = 0; i < args.size(); i++) {
    if (!marshal(*args[i], &host[i], static_cast<int>(i), nested)) {
      context.fail(Error::InvalidArgument);
      return;
    }
  }
  if (g_kernel == nullptr ||
      g_kernel(slot, static_cast<int>(host.size()), host.data()) != 0) {
    context.fail(Error::Internal);
  }
}

template <int Slot>
void trampoline(KernelRuntimeContext& context, Span<EValue*> args) {
  run_kernel(Slot, context, args);
}

template <int... Slots>
constexpr std::array<executorch::runtime::OpFunction, sizeof...(Slots)> trampolines(
    std::integer_sequence<int, Slots...>) {
  return {&trampoline<Slots>...};
}

const auto g_trampolines = trampolines(std::make_integer_sequence<int, kKernelSlots>{});
std::deque<std::string> g_kernel_names;  // the registry keeps pointers to these names

}  // namespace

extern "C" {

void mcu_npu_set_callbacks(DescribeFn describe, NpuFn npu, ReleaseFn release,
                           KernelFn kernel) {
  g_describe = describe;
  g_npu = npu;
  g_release = release;
  g_kernel = kernel;
}

// Registers both backends once; returns the runtime's Error code (0: registered).
int mcu_npu_register_backends() {
  if (g_backends_registered) {
    return 0;
  }
  for (const Backend& backend : g_backends) {
    const Error status = executorch::runtime::register_backend(backend);
    if (status != Error::Ok) {
      return static_cast<int>(status);
    }
  }
  g_backends_registered = true;
  return 0;
}

// Whether the runtime has a kernel under `name` (`ns::op.overload`).
int mcu_npu_has_kernel(const char* name) {
  for (const Kernel& kernel : executorch::runtime::get_registered_kernels()) {
    if (kernel.name_ != nullptr && std::strcmp(kernel.name_, name) == 0) {
      return 1;
    }
  }
  return 0;
}

// Registers the next free trampoline under `name`; returns its slot, or -1 when all are taken
// or the runtime refuses the registration.
int mcu_npu_register_kernel(const char* name) {
  const int slot = static_cast<int>(g_kernel_names.size());
  if (slot >= kKernelSlots) {
    g_last_error = "all " + std::to_string(kKernelSlots) + " kernel slots are taken";
    return -1;
  }
  g_kernel_names.emplace_back(name);
  const Kernel kernel(g_kernel_names.back().c_str(), g_trampolines[slot]);
  const Error status = executorch::runtime::register_kernel(kernel);
  if (status != Error::Ok) {
    g_kernel_names.pop_back();
    g_last_error = std::string("the runtime refused kernel ") + name;
    return -1;
  }
  return slot;
}

int mcu_npu_kernel_slots() {
  return kKernelSlots;
}

const char* mcu_npu_last_error() {
  return g_last_error.c_str();
}

void mcu_npu_set_error(const char* message) {
  g_last_error = message;
}

}  // extern "C"
