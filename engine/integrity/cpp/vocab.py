"""The C++/CUDA rules' vocabulary: the torch/ATen, vendor-library, precision, stream/thread and shape names
the rules in engine.integrity.cpp_* look for (data only, no tree access)."""

from __future__ import annotations

import re

# -- vocabulary ------------------------------------------------------------------------------------------------

# torch::/at:: functions a binding may call: allocation, views, metadata, checks, streams and guards.
ALLOC_FUNCS = {"empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full",
               "full_like", "from_blob", "tensor", "arange", "scalar_tensor"}
ALLOWED_TORCH_FUNCS = ALLOC_FUNCS | {
    "device", "dtype", "kCUDA", "TensorOptions", "getCurrentCUDAStream", "getDefaultCUDAStream",
    "getCurrentDeviceProperties", "getDeviceProperties", "current_device", "device_count", "set_device",
    "check_dim_size", "checkDim", "checkSize", "checkAllSameGPU", "checkContiguous", "isIntegralType",
    "isFloatingType", "typeMetaToScalarType", "toString", "elementSize", "maybe_wrap_dim", "requires_grad",
    "is_available", "cuda", "NoGradGuard", "AutoDispatchBelowADInplaceOrView", "layout", "memory_format",
    "globalContext", "get_device", "OptionalCUDAGuard", "CUDAGuard", "DeviceGuard", "IntArrayRef",
    "nullopt", "optional", "make_optional", "MemoryFormat", "ScalarType", "Scalar", "Device",
    "getCurrentCUDASparseHandle",
}
NON_TENSOR_FUNCS = ALLOWED_TORCH_FUNCS - ALLOC_FUNCS
# Namespaces under torch::/at:: that hold compute or library kernels, whatever the function's name.
COMPUTE_NAMESPACES = ("nn::functional::", "native::", "linalg::", "fft::", "special::", "cuda::blas::",
                      "_ops::", "nn::", "cpu::", "cuda::sparse::")
# Tensor methods that run ATen compute kernels.
COMPUTE_METHODS = {
    "matmul", "mm", "bmm", "addmm", "addmm_", "baddbmm", "mv", "dot", "einsum", "linear", "conv1d", "conv2d",
    "conv3d", "softmax", "log_softmax", "layer_norm", "rms_norm", "group_norm", "batch_norm", "sum", "mean",
    "var", "std", "var_mean", "prod", "norm", "exp", "exp_", "log", "sqrt", "rsqrt", "relu", "relu_", "gelu",
    "silu", "sigmoid", "tanh", "max_pool2d", "avg_pool2d", "add", "add_", "sub", "sub_", "mul", "mul_",
    "div", "div_", "pow", "addcmul", "addcdiv", "cumsum", "amax", "amin", "logsumexp", "cross_entropy",
    "nll_loss", "scaled_dot_product_attention", "clamp", "clamp_", "where", "masked_fill", "index_select",
    "gather", "scatter_add", "neg", "reciprocal", "abs", "erf", "square", "max", "min", "argmax", "topk",
    "sort", "lerp", "outer", "unfold", "im2col", "pad", "dropout", "sigmoid_", "tanh_", "rsqrt_", "sqrt_",
    "exp2", "log2", "expm1", "log1p", "cos", "sin", "triu", "tril", "cumprod", "argmin", "mse_loss",
}
TORCH_COMPUTE_FUNCS = COMPUTE_METHODS | {"cat", "stack", "chain_matmul", "convolution", "_softmax",
                                         "_log_softmax", "native_layer_norm", "cudnn_convolution", "conv_transpose2d",
                                         "embedding", "bilinear", "multi_head_attention_forward"}
# Tensor methods that return something other than a tensor (sizes, pointers, flags, scalars).
NON_TENSOR_METHODS = {
    "size", "sizes", "sym_size", "sym_sizes", "stride", "strides", "numel", "sym_numel", "dim", "ndimension",
    "data_ptr", "const_data_ptr", "mutable_data_ptr", "item", "scalar_type", "dtype", "options", "device",
    "get_device", "is_cuda", "is_cpu", "is_contiguous", "defined", "element_size", "itemsize", "nbytes",
    "storage_offset", "is_floating_point", "layout", "requires_grad", "accessor", "packed_accessor32",
    "packed_accessor64", "generic_packed_accessor", "toString", "name", "use_count", "equal", "allclose",
    "is_same", "is_complex", "is_non_overlapping_and_dense", "suggest_memory_format", "has_storage",
    "storage", "is_sparse", "type", "numel_bytes", "size_bytes",
}
TENSOR_TYPE = re.compile(r"^(?:const\s+|volatile\s+)*(?:(?:torch|at)\s*::\s*)?Tensor\b")
TENSOR_CONTAINER = re.compile(r"\b(?:vector|array|optional|tuple|pair|map|unordered_map|deque|list|"
                              r"TensorList|ITensorListRef)\b[^;]*\bTensor\b|\bTensorList\b")

VENDOR_PREFIX = (("cublasLt", "cuBLASLt"), ("cublas", "cuBLAS"), ("cudnn", "cuDNN"), ("cufft", "cuFFT"),
                 ("cusparseLt", "cuSPARSELt"), ("cusparse", "cuSPARSE"), ("cusolver", "cuSOLVER"),
                 ("curandGenerate", "cuRAND"), ("curandCreateGenerator", "cuRAND"), ("nvjpeg", "nvJPEG"))
VENDOR_HANDLES = {"getCurrentCUDABlasHandle": "cuBLAS", "getCurrentCUDABlasLtHandle": "cuBLASLt",
                  "getCudnnHandle": "cuDNN", "getCurrentCUDASolverDnHandle": "cuSOLVER"}
THRUST_UTILITIES = {"device_pointer_cast", "raw_pointer_cast", "device_ptr", "make_tuple", "get", "pair",
                    "make_pair", "complex", "tuple", "plus", "maximum", "minimum", "identity", "multiplies"}
# CUTLASS's library operators compute the result: device-level operators (cutlass::gemm::device::Gemm, the
# GemmUniversalAdapter), the kernels under them (cutlass::gemm::kernel::GemmUniversal, launched through the adapter
# or cutlass::device_kernel), their collective mainloops and epilogues (CollectiveBuilder, CollectiveMma) and the
# instance library. CuTe (cute::Tensor, layouts, copies, cute::gemm over register fragments, MMA atoms) and
# CUTLASS's numeric types, arrays and arch tags are the building blocks of a kernel the candidate writes itself.
CUTLASS_LIBRARY = re.compile(r"^cutlass::(?:gemm|conv|reduction)::(?:device|kernel)::|"
                             r"^cutlass::(?:gemm|conv|epilogue)::collective::(?:Collective|DefaultEpilogue)\w*\b|"
                             r"^cutlass::library::|^cutlass::device_kernel$")

HALF_TYPES = {"half", "half2", "__half", "__half2", "__nv_bfloat16", "__nv_bfloat162", "nv_bfloat16",
              "nv_bfloat162", "__nv_fp8_e4m3", "__nv_fp8_e5m2", "__nv_fp8x2_e4m3", "__nv_fp8x2_e5m2",
              "__nv_fp8x4_e4m3", "__nv_fp8x4_e5m2", "__nv_fp8_storage_t", "__half_raw", "__nv_bfloat16_raw"}
HALF_TEXT = re.compile(r"(?<![\w:])(?:" + "|".join(sorted(HALF_TYPES, key=len, reverse=True)) + r")\b|"
                       r"\b(?:at|c10)::(?:Half|BFloat16|Float8_\w+)\b")
HALF_QUALIFIED = re.compile(r"^(?:at|c10|torch)::(?:Half|BFloat16|Float8_\w+)$")
HALF_SCALARS = re.compile(r"^(?:(?:at|c10|torch)::)?(?:ScalarType::)?(?:kHalf|kFloat16|kBFloat16|Half|BFloat16|"
                          r"kFloat8_\w+|Float8_\w+)$")
HALF_CALLS = re.compile(r"^(?:__float2half\w*|__floats2half2_rn|__float22half2_rn|__half2float|__half22float2|"
                        r"__float2bfloat16\w*|__floats2bfloat162_rn|__float22bfloat162_rn|__bfloat162float|"
                        r"__bfloat1622float2|__low2float|__high2float|__h(?:add|sub|mul|div|fma|neg|max|min)2?\w*|"
                        r"h2?(?:exp|log|sqrt|rsqrt|rcp|sin|cos)2?|__nv_cvt_\w*fp8\w*)$")
PTX_LOW = re.compile(r"\.(?:f16|bf16|f16x2|bf16x2|e4m3|e5m2|e4m3x2|e5m2x2)\b")
PTX_TF32 = re.compile(r"\.tf32\b")
TF32_CALLS = {"__float_to_tf32", "wmma::__float_to_tf32", "nvcuda::wmma::__float_to_tf32"}
TF32_SPLIT_CALLS = re.compile(r"(?:^|::)(?:__uint_as_float|__int_as_float|__float_to_tf32|float)$")
FAST_MATH_ENUMS = re.compile(r"^(?:CUBLAS_TF32_TENSOR_OP_MATH|CUBLAS_COMPUTE_32F_FAST_\w+|"
                             r"CUDNN_DATA_HALF|CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION)$")
TF32_SWITCHES = {"setAllowTF32CuBLAS", "setAllowTF32CuDNN", "setFloat32MatmulPrecision",
                 "setAllowFP16ReductionCuBLAS", "setAllowBF16ReductionCuBLAS"}
LOW_DTYPE_CALLS = {"to", "toType", "dtype", "type", "empty", "empty_like", "zeros", "zeros_like", "ones",
                   "ones_like", "full", "full_like", "_to_copy", "TensorOptions", "options", "from_blob",
                   "scalar_tensor", "tensor", "arange", "empty_strided"}

STREAM_SOURCES = {"getStreamFromPool", "getStreamFromExternal"}
STREAM_CREATE = re.compile(r"^cudaStreamCreate\w*$")
STREAM_SETTERS = {"setCurrentCUDAStream", "CUDAStreamGuard", "OptionalCUDAStreamGuard", "CUDAMultiStreamGuard"}
STREAM_NON_WORK = re.compile(r"^(?:cudaStreamCreate\w*|cudaStreamDestroy|cudaStreamSynchronize|cudaStreamQuery|"
                             r"cudaStreamGetPriority|cudaStreamGetFlags|cudaStreamWaitEvent|cudaEventRecord\w*|"
                             r"cudaEventSynchronize|cudaEventQuery)$")
THREAD_TYPES = re.compile(r"^std::(?:thread|jthread)$")
THREAD_CALLS = {"std::async": "std::async", "pthread_create": "pthread_create",
                "std::thread": "std::thread", "std::jthread": "std::jthread"}
HOST_CALLBACKS = {"cudaLaunchHostFunc", "cudaStreamAddCallback"}
LAUNCH_CALLS = re.compile(r"^(?:cudaLaunchKernel\w*|cudaLaunchCooperativeKernel\w*|cuLaunchKernel\w*|"
                          r"cudaGraphLaunch)$")
RETHROW_CALLS = re.compile(r"^(?:TORCH_CHECK\w*|AT_ERROR|TORCH_INTERNAL_ASSERT\w*|std::rethrow_exception|abort|"
                           r"std::abort|exit|std::exit|C10_THROW_ERROR|TORCH_WARN\w*)$")

CALL_COUNTER = re.compile(r"call|count|invoc|iter|times|n_?run|step|hits|seen", re.IGNORECASE)
INTEGRAL = re.compile(r"\b(?:int|long|unsigned|size_t|int64_t|uint64_t|int32_t|uint32_t|short)\b")
SIZE_NAMES = {"n", "N", "m", "M", "k", "K", "rows", "cols", "batch", "hidden", "dim", "D", "H", "W", "C", "B",
              "L", "T", "S", "inner", "outer", "features", "in_features", "out_features", "numel", "size", "len",
              "length", "width", "height", "seq", "seq_len", "num_rows", "num_cols", "n_rows", "n_cols",
              "batch_size", "hidden_size", "channels", "in_channels", "out_channels"}
SIZE_METHODS = {"size", "numel", "stride", "sizes", "strides", "sym_size"}
SHAPE_NAME = re.compile(r"^(N|M|K|ROWS|COLS|HIDDEN|BATCH|DIM|SEQ\w*|FEATURES|IN_FEATURES|OUT_FEATURES|"
                        r"NUM_ROWS|NUM_COLS|N_COLS|N_ROWS|HIDDEN_\w*|ROW_LEN\w*|COL\w*|\w*_SIZE_N|"
                        r"WIDTH|HEIGHT|CHANNELS)$", re.IGNORECASE)
PERSISTENT_SKIP = re.compile(r"\b(?:__constant__|__device__|__shared__|__managed__|extern|constexpr|"
                             r"thread_local|std::once_flag|once_flag|std::mutex|mutex)\b")
KEY_METHODS = {"find", "count", "at", "emplace", "insert", "contains", "try_emplace", "operator[]"}
