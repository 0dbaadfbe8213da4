"""CUDA API callback ids whose activity records perfscope keeps: calls that launch, copy or synchronise.

Generated from the CUDA 13.0 headers ``cupti_runtime_cbid.h`` and ``cupti_driver_cbid.h``
(CUPTI API version 130001) by selecting names that contain Launch, Memcpy, Memset,
Synchroniz or WaitEvent, minus graph-node setup calls (``cudaGraphAddMemcpyNode`` and
friends) and host-function launches.  Callback ids are append-only across CUDA versions,
so the table stays valid on newer CUPTI; ids missing here are simply not recorded.
Runtime names lose their ``_vNNNN`` version suffix (``cudaLaunchKernel_v7000`` ->
``cudaLaunchKernel``); driver names are the exported symbol names.  Added by hand: the
managed allocations (:data:`MANAGED_ALLOC`), whose callback tells the native sink that the
job uses Unified Memory (the collector arms CUPTI's Unified Memory counters only then).
"""
from __future__ import annotations

#: ``CUPTI_RUNTIME_TRACE_CBID_SIZE`` and ``CUPTI_DRIVER_TRACE_CBID_SIZE`` in CUDA 13.0.
RUNTIME_CBID_SIZE = 523
DRIVER_CBID_SIZE = 807

#: (runtime, driver) callback ids of the managed allocations: ``cudaMallocManaged``, ``cuMemAllocManaged``
MANAGED_ALLOC = (206, 371)

#: runtime API callback id -> function name
RUNTIME: dict[int, str] = {
    13: 'cudaLaunch', 31: 'cudaMemcpy', 32: 'cudaMemcpy2D', 33: 'cudaMemcpyToArray',
    34: 'cudaMemcpy2DToArray', 35: 'cudaMemcpyFromArray', 36: 'cudaMemcpy2DFromArray',
    37: 'cudaMemcpyArrayToArray', 38: 'cudaMemcpy2DArrayToArray', 39: 'cudaMemcpyToSymbol',
    40: 'cudaMemcpyFromSymbol', 41: 'cudaMemcpyAsync', 42: 'cudaMemcpyToArrayAsync',
    43: 'cudaMemcpyFromArrayAsync', 44: 'cudaMemcpy2DAsync', 45: 'cudaMemcpy2DToArrayAsync',
    46: 'cudaMemcpy2DFromArrayAsync', 47: 'cudaMemcpyToSymbolAsync',
    48: 'cudaMemcpyFromSymbolAsync', 49: 'cudaMemset', 50: 'cudaMemset2D',
    51: 'cudaMemsetAsync', 52: 'cudaMemset2DAsync', 126: 'cudaThreadSynchronize',
    131: 'cudaStreamSynchronize', 137: 'cudaEventSynchronize', 142: 'cudaMemset3D',
    143: 'cudaMemset3DAsync', 144: 'cudaMemcpy3D', 145: 'cudaMemcpy3DAsync',
    147: 'cudaStreamWaitEvent', 160: 'cudaMemcpyPeer', 161: 'cudaMemcpyPeerAsync',
    162: 'cudaMemcpy3DPeer', 163: 'cudaMemcpy3DPeerAsync', 165: 'cudaDeviceSynchronize',
    206: 'cudaMallocManaged',
    211: 'cudaLaunchKernel', 213: 'cudaLaunch_ptsz', 214: 'cudaLaunchKernel_ptsz',
    215: 'cudaMemcpy_ptds', 216: 'cudaMemcpy2D_ptds', 217: 'cudaMemcpyToArray_ptds',
    218: 'cudaMemcpy2DToArray_ptds', 219: 'cudaMemcpyFromArray_ptds',
    220: 'cudaMemcpy2DFromArray_ptds', 221: 'cudaMemcpyArrayToArray_ptds',
    222: 'cudaMemcpy2DArrayToArray_ptds', 223: 'cudaMemcpyToSymbol_ptds',
    224: 'cudaMemcpyFromSymbol_ptds', 225: 'cudaMemcpyAsync_ptsz',
    226: 'cudaMemcpyToArrayAsync_ptsz', 227: 'cudaMemcpyFromArrayAsync_ptsz',
    228: 'cudaMemcpy2DAsync_ptsz', 229: 'cudaMemcpy2DToArrayAsync_ptsz',
    230: 'cudaMemcpy2DFromArrayAsync_ptsz', 231: 'cudaMemcpyToSymbolAsync_ptsz',
    232: 'cudaMemcpyFromSymbolAsync_ptsz', 233: 'cudaMemset_ptds', 234: 'cudaMemset2D_ptds',
    235: 'cudaMemsetAsync_ptsz', 236: 'cudaMemset2DAsync_ptsz',
    239: 'cudaStreamSynchronize_ptsz', 243: 'cudaMemset3D_ptds', 244: 'cudaMemset3DAsync_ptsz',
    245: 'cudaMemcpy3D_ptds', 246: 'cudaMemcpy3DAsync_ptsz', 247: 'cudaStreamWaitEvent_ptsz',
    249: 'cudaMemcpy3DPeer_ptds', 250: 'cudaMemcpy3DPeerAsync_ptsz',
    269: 'cudaLaunchCooperativeKernel', 270: 'cudaLaunchCooperativeKernel_ptsz',
    272: 'cudaLaunchCooperativeKernelMultiDevice', 311: 'cudaGraphLaunch',
    312: 'cudaGraphLaunch_ptsz', 430: 'cudaLaunchKernelExC', 431: 'cudaLaunchKernelExC_ptsz',
    482: 'cudaMemcpyBatchAsync', 483: 'cudaMemcpyBatchAsync_ptsz',
    484: 'cudaMemcpy3DBatchAsync', 485: 'cudaMemcpy3DBatchAsync_ptsz',
    505: '__cudaLaunchKernel', 506: '__cudaLaunchKernel_ptsz', 509: 'cudaMemcpyBatchAsync',
    510: 'cudaMemcpyBatchAsync_ptsz', 511: 'cudaMemcpy3DBatchAsync',
    512: 'cudaMemcpy3DBatchAsync_ptsz',
}

#: driver API callback id -> function name
DRIVER: dict[int, str] = {
    17: 'cuCtxSynchronize', 43: 'cuMemcpyHtoD', 44: 'cu64MemcpyHtoD', 45: 'cuMemcpyDtoH',
    46: 'cu64MemcpyDtoH', 47: 'cuMemcpyDtoD', 48: 'cu64MemcpyDtoD', 49: 'cuMemcpyDtoA',
    50: 'cu64MemcpyDtoA', 51: 'cuMemcpyAtoD', 52: 'cu64MemcpyAtoD', 53: 'cuMemcpyHtoA',
    54: 'cuMemcpyAtoH', 55: 'cuMemcpyAtoA', 56: 'cuMemcpy2D', 57: 'cuMemcpy2DUnaligned',
    58: 'cuMemcpy3D', 59: 'cu64Memcpy3D', 60: 'cuMemcpyHtoDAsync', 61: 'cu64MemcpyHtoDAsync',
    62: 'cuMemcpyDtoHAsync', 63: 'cu64MemcpyDtoHAsync', 64: 'cuMemcpyDtoDAsync',
    65: 'cu64MemcpyDtoDAsync', 66: 'cuMemcpyHtoAAsync', 67: 'cuMemcpyAtoHAsync',
    68: 'cuMemcpy2DAsync', 69: 'cuMemcpy3DAsync', 70: 'cu64Memcpy3DAsync', 71: 'cuMemsetD8',
    72: 'cu64MemsetD8', 73: 'cuMemsetD16', 74: 'cu64MemsetD16', 75: 'cuMemsetD32',
    76: 'cu64MemsetD32', 77: 'cuMemsetD2D8', 78: 'cu64MemsetD2D8', 79: 'cuMemsetD2D16',
    80: 'cu64MemsetD2D16', 81: 'cuMemsetD2D32', 82: 'cu64MemsetD2D32', 115: 'cuLaunch',
    116: 'cuLaunchGrid', 117: 'cuLaunchGridAsync', 121: 'cuEventSynchronize',
    126: 'cuStreamSynchronize', 216: 'cuMemsetD8Async', 217: 'cu64MemsetD8Async',
    218: 'cuMemsetD16Async', 219: 'cu64MemsetD16Async', 220: 'cuMemsetD32Async',
    221: 'cu64MemsetD32Async', 222: 'cuMemsetD2D8Async', 223: 'cu64MemsetD2D8Async',
    224: 'cuMemsetD2D16Async', 225: 'cu64MemsetD2D16Async', 226: 'cuMemsetD2D32Async',
    227: 'cu64MemsetD2D32Async', 232: 'cu64Memcpy2D', 233: 'cu64Memcpy2DUnaligned',
    234: 'cu64Memcpy2DAsync', 248: 'cuMemcpy_v2', 249: 'cuMemsetD8_v2', 250: 'cuMemsetD16_v2',
    251: 'cuMemsetD32_v2', 252: 'cuMemsetD2D8_v2', 253: 'cuMemsetD2D16_v2',
    254: 'cuMemsetD2D32_v2', 276: 'cuMemcpyHtoD_v2', 277: 'cuMemcpyHtoDAsync_v2',
    278: 'cuMemcpyDtoH_v2', 279: 'cuMemcpyDtoHAsync_v2', 280: 'cuMemcpyDtoD_v2',
    281: 'cuMemcpyDtoDAsync_v2', 282: 'cuMemcpyAtoH_v2', 283: 'cuMemcpyAtoHAsync_v2',
    284: 'cuMemcpyAtoD_v2', 285: 'cuMemcpyDtoA_v2', 286: 'cuMemcpyAtoA_v2',
    287: 'cuMemcpy2D_v2', 288: 'cuMemcpy2DUnaligned_v2', 289: 'cuMemcpy2DAsync_v2',
    290: 'cuMemcpy3D_v2', 291: 'cuMemcpy3DAsync_v2', 292: 'cuMemcpyHtoA_v2',
    293: 'cuMemcpyHtoAAsync_v2', 295: 'cuStreamWaitEvent', 305: 'cuMemcpy',
    306: 'cuMemcpyAsync', 307: 'cuLaunchKernel', 318: 'cuMemcpyPeer', 319: 'cuMemcpyPeerAsync',
    320: 'cuMemcpy3DPeer', 321: 'cuMemcpy3DPeerAsync', 371: 'cuMemAllocManaged',
    397: 'cuMemcpyHtoD_v2_ptds',
    398: 'cuMemcpyDtoH_v2_ptds', 399: 'cuMemcpyDtoD_v2_ptds', 400: 'cuMemcpyDtoA_v2_ptds',
    401: 'cuMemcpyAtoD_v2_ptds', 402: 'cuMemcpyHtoA_v2_ptds', 403: 'cuMemcpyAtoH_v2_ptds',
    404: 'cuMemcpyAtoA_v2_ptds', 405: 'cuMemcpy2D_v2_ptds', 406: 'cuMemcpy2DUnaligned_v2_ptds',
    407: 'cuMemcpy3D_v2_ptds', 408: 'cuMemcpy_ptds', 409: 'cuMemcpyPeer_ptds',
    410: 'cuMemcpy3DPeer_ptds', 411: 'cuMemsetD8_v2_ptds', 412: 'cuMemsetD16_v2_ptds',
    413: 'cuMemsetD32_v2_ptds', 414: 'cuMemsetD2D8_v2_ptds', 415: 'cuMemsetD2D16_v2_ptds',
    416: 'cuMemsetD2D32_v2_ptds', 418: 'cuMemcpyAsync_ptsz', 419: 'cuMemcpyHtoAAsync_v2_ptsz',
    420: 'cuMemcpyAtoHAsync_v2_ptsz', 421: 'cuMemcpyHtoDAsync_v2_ptsz',
    422: 'cuMemcpyDtoHAsync_v2_ptsz', 423: 'cuMemcpyDtoDAsync_v2_ptsz',
    424: 'cuMemcpy2DAsync_v2_ptsz', 425: 'cuMemcpy3DAsync_v2_ptsz',
    426: 'cuMemcpyPeerAsync_ptsz', 427: 'cuMemcpy3DPeerAsync_ptsz',
    428: 'cuMemsetD8Async_ptsz', 429: 'cuMemsetD16Async_ptsz', 430: 'cuMemsetD32Async_ptsz',
    431: 'cuMemsetD2D8Async_ptsz', 432: 'cuMemsetD2D16Async_ptsz',
    433: 'cuMemsetD2D32Async_ptsz', 436: 'cuStreamWaitEvent_ptsz',
    440: 'cuStreamSynchronize_ptsz', 442: 'cuLaunchKernel_ptsz',
    477: 'cuLaunchCooperativeKernel', 478: 'cuLaunchCooperativeKernel_ptsz',
    480: 'cuLaunchCooperativeKernelMultiDevice', 514: 'cuGraphLaunch',
    515: 'cuGraphLaunch_ptsz', 652: 'cuLaunchKernelEx', 653: 'cuLaunchKernelEx_ptsz',
    750: 'cuGreenCtxWaitEvent', 756: 'cuCtxWaitEvent', 776: 'cuMemcpyBatchAsync',
    777: 'cuMemcpyBatchAsync_ptsz', 778: 'cuMemcpy3DBatchAsync',
    779: 'cuMemcpy3DBatchAsync_ptsz', 796: 'cuMemcpyBatchAsync_v2',
    797: 'cuMemcpyBatchAsync_v2_ptsz', 798: 'cuMemcpy3DBatchAsync_v2',
    799: 'cuMemcpy3DBatchAsync_v2_ptsz', 800: 'cuCtxSynchronize_v2',
}
