/* A stand-in libcuda.so for building and running on machines with no NVIDIA driver (CI).
 *
 * It defines the driver entry points the cubinforge loader and example use, with the
 * versioned symbol names cuda.h maps them to (cuMemAlloc -> cuMemAlloc_v2, ...): including
 * cuda.h and defining the functions under their plain names gets those names right for
 * whichever toolkit the stub is built against. Every call reports that there is no device,
 * so a host linked against it fails cleanly at cuInit; the loader's pure parts (expressions,
 * validation, packing, selection) need no driver and run normally.
 *
 *   cc -shared -fPIC -I$CUDA_HOME/include cuda_stub.c -o libcuda.so -Wl,-soname,libcuda.so.1
 */
#include <cuda.h>
#include <stddef.h>

CUresult CUDAAPI cuGetErrorName(CUresult error, const char **pStr) {
  switch (error) {
    case CUDA_SUCCESS: *pStr = "CUDA_SUCCESS"; return CUDA_SUCCESS;
    case CUDA_ERROR_INVALID_VALUE: *pStr = "CUDA_ERROR_INVALID_VALUE"; return CUDA_SUCCESS;
    case CUDA_ERROR_NOT_INITIALIZED: *pStr = "CUDA_ERROR_NOT_INITIALIZED"; return CUDA_SUCCESS;
    case CUDA_ERROR_NO_DEVICE: *pStr = "CUDA_ERROR_NO_DEVICE"; return CUDA_SUCCESS;
    case CUDA_ERROR_NOT_FOUND: *pStr = "CUDA_ERROR_NOT_FOUND"; return CUDA_SUCCESS;
    default: *pStr = NULL; return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult CUDAAPI cuGetErrorString(CUresult error, const char **pStr) { return cuGetErrorName(error, pStr); }

CUresult CUDAAPI cuInit(unsigned int flags) { (void)flags; return CUDA_ERROR_NO_DEVICE; }

#define STUB(decl) CUresult CUDAAPI decl { return CUDA_ERROR_NOT_INITIALIZED; }

STUB(cuDeviceGet(CUdevice *device, int ordinal))
STUB(cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev))
STUB(cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev))
STUB(cuDevicePrimaryCtxRelease(CUdevice dev))
STUB(cuCtxSetCurrent(CUcontext ctx))
STUB(cuCtxGetDevice(CUdevice *device))
STUB(cuCtxSynchronize(void))
STUB(cuModuleLoadData(CUmodule *module, const void *image))
STUB(cuModuleUnload(CUmodule hmod))
STUB(cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name))
STUB(cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value))
STUB(cuTensorMapEncodeTiled(CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType, cuuint32_t tensorRank,
                            void *globalAddress, const cuuint64_t *globalDim, const cuuint64_t *globalStrides,
                            const cuuint32_t *boxDim, const cuuint32_t *elementStrides,
                            CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
                            CUtensorMapL2promotion l2Promotion, CUtensorMapFloatOOBfill oobFill))
STUB(cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra))
STUB(cuMemAlloc(CUdeviceptr *dptr, size_t bytesize))
STUB(cuMemFree(CUdeviceptr dptr))
STUB(cuMemcpyHtoD(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount))
STUB(cuMemcpyDtoH(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount))
STUB(cuMemsetD8(CUdeviceptr dstDevice, unsigned char uc, size_t N))
STUB(cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream))
STUB(cuMemcpyHtoDAsync(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream))
STUB(cuStreamCreate(CUstream *phStream, unsigned int Flags))
STUB(cuStreamSynchronize(CUstream hStream))
STUB(cuStreamDestroy(CUstream hStream))
STUB(cuEventCreate(CUevent *phEvent, unsigned int Flags))
STUB(cuEventRecord(CUevent hEvent, CUstream hStream))
STUB(cuEventSynchronize(CUevent hEvent))
STUB(cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd))
STUB(cuEventDestroy(CUevent hEvent))
