// gpucomm's own declarations of the NVRTC calls it uses, called through a
// table filled by dlsym at run time. Only nvrtc_cgo.go includes this file.
#include <stddef.h>
#include <stdlib.h>

typedef int nvrtcResult;
typedef struct gpucomm_nvrtcProgram* nvrtcProgram;

enum {
	N_nvrtcVersion, N_nvrtcGetErrorString, N_nvrtcCreateProgram, N_nvrtcCompileProgram,
	N_nvrtcGetPTXSize, N_nvrtcGetPTX, N_nvrtcGetCUBINSize, N_nvrtcGetCUBIN,
	N_nvrtcGetProgramLogSize, N_nvrtcGetProgramLog, N_nvrtcDestroyProgram,
	N_count
};

static void* gpucomm_nvrtc[N_count];
static void gpucomm_nvrtc_set(int slot, void* fn) { gpucomm_nvrtc[slot] = fn; }
static void gpucomm_nvrtc_clear(void) { for (int i = 0; i < N_count; i++) gpucomm_nvrtc[i] = NULL; }

#define NV(name, params) ((nvrtcResult (*) params) gpucomm_nvrtc[N_##name])

static const char* gn_errorString(nvrtcResult r) {
	if (!gpucomm_nvrtc[N_nvrtcGetErrorString]) return NULL;
	return ((const char* (*)(nvrtcResult)) gpucomm_nvrtc[N_nvrtcGetErrorString])(r);
}
static nvrtcResult gn_nvrtcVersion(int* major, int* minor) { return NV(nvrtcVersion, (int*, int*))(major, minor); }
// No headers: kernels are single self-contained sources.
static nvrtcResult gn_nvrtcCreateProgram(nvrtcProgram* p, const char* src, const char* name) {
	return NV(nvrtcCreateProgram, (nvrtcProgram*, const char*, const char*, int, const char* const*, const char* const*))(p, src, name, 0, NULL, NULL);
}
static nvrtcResult gn_nvrtcCompileProgram(nvrtcProgram p, int n, void* opts) {
	return NV(nvrtcCompileProgram, (nvrtcProgram, int, const char* const*))(p, n, (const char* const*)opts);
}
static nvrtcResult gn_nvrtcGetPTXSize(nvrtcProgram p, size_t* n) { return NV(nvrtcGetPTXSize, (nvrtcProgram, size_t*))(p, n); }
static nvrtcResult gn_nvrtcGetPTX(nvrtcProgram p, void* out) { return NV(nvrtcGetPTX, (nvrtcProgram, char*))(p, (char*)out); }
static nvrtcResult gn_nvrtcGetCUBINSize(nvrtcProgram p, size_t* n) { return NV(nvrtcGetCUBINSize, (nvrtcProgram, size_t*))(p, n); }
static nvrtcResult gn_nvrtcGetCUBIN(nvrtcProgram p, void* out) { return NV(nvrtcGetCUBIN, (nvrtcProgram, char*))(p, (char*)out); }
static nvrtcResult gn_nvrtcGetProgramLogSize(nvrtcProgram p, size_t* n) { return NV(nvrtcGetProgramLogSize, (nvrtcProgram, size_t*))(p, n); }
static nvrtcResult gn_nvrtcGetProgramLog(nvrtcProgram p, void* out) { return NV(nvrtcGetProgramLog, (nvrtcProgram, char*))(p, (char*)out); }
static nvrtcResult gn_nvrtcDestroyProgram(nvrtcProgram* p) { return NV(nvrtcDestroyProgram, (nvrtcProgram*))(p); }

// The program's outputs, by kind: 0 the log, 1 PTX, 2 the cubin.
static nvrtcResult gn_outputSize(int kind, nvrtcProgram p, size_t* n) {
	switch (kind) {
	case 0: return gn_nvrtcGetProgramLogSize(p, n);
	case 1: return gn_nvrtcGetPTXSize(p, n);
	default: return gn_nvrtcGetCUBINSize(p, n);
	}
}
static nvrtcResult gn_output(int kind, nvrtcProgram p, void* out) {
	switch (kind) {
	case 0: return gn_nvrtcGetProgramLog(p, out);
	case 1: return gn_nvrtcGetPTX(p, out);
	default: return gn_nvrtcGetCUBIN(p, out);
	}
}
