"""Every constant of include/dsv4/dsv4_types.h, dsv4.h and dsv4_paged.h, in one table.

IntEnums compare equal to the plain integers the C ABI uses. Statuses stay plain integers where
they come back from the library (a newer library may return a value this table does not know).
"""
import enum

# DSV4_API_VERSION of the header this binding mirrors: major << 16 | minor.
API_VERSION_MAJOR = 0
API_VERSION_MINOR = 2
API_VERSION = (API_VERSION_MAJOR << 16) | API_VERSION_MINOR


class Status(enum.IntEnum):
    OK = 0
    INVALID_ARGUMENT = 1
    UNSUPPORTED = 2
    NO_BACKEND = 3
    BACKEND_ERROR = 4
    OUT_OF_MEMORY = 5
    WORKSPACE_TOO_SMALL = 6
    PLAN_MISMATCH = 7
    ABI_MISMATCH = 8
    INTERNAL = 9


class DeviceType(enum.IntEnum):
    """DLPack device codes (DLDeviceType)."""
    CPU = 1
    CUDA = 2
    CUDA_HOST = 3
    OPENCL = 4
    ROCM = 10
    CUDA_MANAGED = 13
    ONEAPI = 14


class DTypeCode(enum.IntEnum):
    """DLPack dtype codes (DLDataTypeCode)."""
    INT = 0
    UINT = 1
    FLOAT = 2
    BFLOAT = 4
    FLOAT8_E4M3FN = 10


class KvLayout(enum.IntEnum):
    NONE = 0
    BF16 = 1
    FP8_V4_584B = 2
    FP8_V32_656B = 3
    FP8_E4M3_PER_TENSOR = 4
    FP16 = 5


class KvCacheFlag(enum.IntFlag):
    FP8_FNUZ = 1


class LogLevel(enum.IntEnum):
    ERROR = 0
    WARN = 1
    INFO = 2
    DEBUG = 3


class Mode(enum.IntEnum):
    EXPLICIT = 0
    PAGED = 1


class IndexFormat(enum.IntEnum):
    DENSE = 0
    CSR = 1


class PlanFlag(enum.IntFlag):
    NONE = 0
    BATCH_INVARIANT = 1
    REFERENCE_KERNEL = 2


class ExportFormat(enum.IntEnum):
    FLASHMLA = 0
    CSR = 1
    FLASHINFER = 2
