"""GPU catalog: memory, compute capability, bf16 support, dense peak TFLOP/s (fp16, bf16, fp32), memory
bandwidth and the interconnect between GPUs.

Figures from vendor spec sheets (cited above the table). `memory_bytes` is the card's nominal
memory (GB as 2**30 bytes); what CUDA reports as usable is a little lower and the planner's CUDA
overhead model accounts for the context on top. Below every command: the resolved run reads it for its
precision and attention decisions on a target GPU, `plan` for memory and speed.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

GiB = 2**30


@dataclass(frozen=True)
class GPUSpec:
    id: str
    name: str
    memory_bytes: int
    compute_capability: tuple[int, int]
    bf16: bool
    fp16_tflops: float  # dense tensor-core peak, fp16 inputs with fp32 accumulation (what training matmuls use)
    bf16_tflops: float | None  # the same for bf16; None where the GPU has no bf16
    bandwidth_gbs: float  # memory bandwidth, GB/s
    # What the driver reports as usable total (a bit under nominal), the CUDA context + resident kernels
    # per process (lazy loading on), and cuBLAS + cuBLASLt workspaces of one stream (32 MiB on Hopper).
    usable_bytes: int = 0
    context_bytes: int = 450 * 2**20
    workspace_bytes: int = 9 * 2**20
    fp32_tflops: float = 0.0  # dense fp32 (CUDA cores; torch's default matmul precision, TF32 off)
    interconnect: str = "pcie3"  # between GPUs of one machine: "nvlink", "pcie3", "pcie4", "pcie5"
    link_gbs: float = 16.0  # GB/s per direction per GPU over `interconnect` (collectives' bus bandwidth)

    def matmul_tflops(self, precision: str) -> float:
        """Dense peak of a training matmul in the run's precision (fp16 / bf16 autocast, or fp32)."""
        if precision == "fp32":
            return self.fp32_tflops
        if precision == "bf16" and self.bf16 and self.bf16_tflops:
            return self.bf16_tflops
        return self.fp16_tflops

    @property
    def total_bytes(self) -> int:
        return self.usable_bytes or self.memory_bytes

    @property
    def fa2(self) -> bool:
        """FlashAttention-2 needs sm80+ (Ampere or newer)."""
        return self.compute_capability >= (8, 0)


# Vendor spec sheets (dense figures; sheets that print "with sparsity" are halved):
#   T4: NVIDIA T4 datasheet (mixed-precision FP16/FP32 65 TFLOPS, FP32 8.1, 320 GB/s, PCIe Gen3 x16).
#   V100 (SXM2): NVIDIA V100 datasheet (tensor 125, FP32 15.7, 900 GB/s, NVLink 300 GB/s total).
#   Quadro RTX 6000: datasheet (tensor 130.5, FP32 16.3, 672 GB/s, PCIe Gen3; its NVLink bridge joins two
#     cards only, so collectives over more are PCIe: PCIe is used).
#   RTX 3090 / RTX 4090: NVIDIA GA102 / AD102 architecture whitepapers, appendix tables: FP16 and BF16
#     tensor with FP32 accumulate 71 / 165.2 dense (GeForce runs these at half the FP16-accumulate rate,
#     142 / 330; training accumulates in fp32, so the table holds 71 / 165), FP32 35.6 / 82.6, 936 / 1008
#     GB/s, PCIe Gen4 (the 3090's two-card bridge not used, as above).
#   A10: datasheet (BF16/FP16 tensor 125 dense, FP32 31.2, 600 GB/s, PCIe Gen4).
#   L4: datasheet (FP16/BF16 tensor 242 with sparsity -> 121, FP32 30.3, 300 GB/s, PCIe Gen4 x16).
#   A100 SXM: datasheet (BF16/FP16 tensor 312, FP32 19.5, 1,555 GB/s (40 GB) / 2,039 GB/s (80 GB),
#     NVLink 600 GB/s total).
#   H100 SXM / H200: datasheets (BF16/FP16 tensor 1,979 with sparsity -> 989, FP32 67, 3.35 / 4.8 TB/s,
#     NVLink 900 GB/s total).
#   RTX A6000 / A40: GA102 whitepaper appendix (RTX A6000: FP16 and BF16 tensor with FP32 accumulate 154.8
#     dense, full rate on this workstation card, unlike the 3090) and A40 datasheet (BF16/FP16 tensor 299.4
#     with sparsity -> 149.7); FP32 38.7 / 37.4, 768 / 696 GB/s, PCIe Gen4 x16 (their NVLink bridge joins two
#     cards only: PCIe is used).
#   L40 / L40S: datasheets (FP16/BF16 tensor 362.1 / 733 with sparsity -> 181.05 / 362.05; FP32 90.5 / 91.6;
#     864 GB/s; PCIe Gen4 x16, no NVLink). The same AD102 chip at the same clocks: the L40 sheet rates tensors
#     at the half (FP32-accumulate) rate, the L40S sheet at the full one; the table holds each sheet's figure.
#   RTX 6000 Ada: Ada (AD102) whitepaper appendix: FP16 and BF16 tensor with FP32 accumulate 364.2 dense
#     (full rate on this card, half on the 4090); datasheet: FP32 91.1, 960 GB/s, PCIe Gen4 x16, no NVLink.
#   A100 PCIe 40 GB / 80 GB: A100 datasheet, PCIe columns: the SXM card's tensor and FP32 rates, 1,555 / 1,935
#     GB/s; the NVLink bridge joins two cards only, so collectives are PCIe Gen4.
#   H100 PCIe: H100 datasheet, PCIe column (BF16/FP16 tensor 1,513 with sparsity -> 756.5, FP32 51, 2 TB/s,
#     PCIe Gen5 128 GB/s both directions; NVLink bridge of two cards: PCIe is used).
#   H100 NVL: H100 datasheet, NVL column (BF16/FP16 tensor 1,671 with sparsity -> 835.5, FP32 60, 94 GB, 3.9
#     TB/s, PCIe Gen5; NVLink bridge of two cards: PCIe is used).
#   B200: HGX B200 datasheet, per GPU (eight-GPU figures / 8: FP16/BF16 tensor 36 PFLOPS with sparsity ->
#     2,250 dense, FP32 600 -> 75, 180 GB HBM3e, 64 TB/s -> 8 TB/s, NVLink 5 1.8 TB/s total).
# Cards people fine-tune on at home (the GeForce rows hold the FP32-accumulate rate, half the FP16-accumulate one
# the product pages print; "computed" = SMs x boost clock x the architecture's per-SM tensor rate, which reproduces
# every whitepaper figure above: GA10x / AD10x 1,024 dense FP16 FLOPs per SM per clock, GB20x the same):
#   RTX 3080 10 GB: GA102 whitepaper appendix: FP16 / BF16 tensor with FP32 accumulate 59.5 dense (119 with FP16
#     accumulate), FP32 29.8, 760 GB/s (320-bit, 19 Gbps GDDR6X), PCIe Gen4 x16.
#   RTX 3080 12 GB: NVIDIA product page (70 SMs, 8,960 CUDA cores, 1.71 GHz boost, 384-bit 19 Gbps GDDR6X): computed
#     61.3 (FP32 accumulate), FP32 30.6, 912 GB/s, PCIe Gen4 x16.
#   RTX 3060 12 GB / 8 GB (GA106): product page (28 SMs, 3,584 CUDA cores, 1.777 GHz boost; 192-bit / 128-bit 15 Gbps
#     GDDR6): computed 25.5 (51 with FP16 accumulate, the "51 tensor TFLOPS" NVIDIA prints), FP32 12.7, 360 / 240 GB/s,
#     PCIe Gen4 x16.
#   RTX 4060 Ti 16 GB / 8 GB (AD106): Ada product page (34 SMs, 4,352 CUDA cores, 2.535 GHz boost, 128-bit 18 Gbps
#     GDDR6): computed 44.1, FP32 22.1, 288 GB/s; PCIe Gen4 x8 (15.75 GB/s per direction, PCIE_X8 below).
#   RTX 4070 (AD104): product page (46 SMs, 5,888 CUDA cores, 2.475 GHz, 192-bit 21 Gbps GDDR6X): computed 58.3,
#     FP32 29.1, 504 GB/s, PCIe Gen4 x16.
#   RTX 4070 Ti SUPER (AD103): product page (66 SMs, 8,448 CUDA cores, 2.61 GHz, 256-bit 21 Gbps GDDR6X): computed
#     88.2, FP32 44.1, 672 GB/s, PCIe Gen4 x16.
#   RTX 4080 (AD103): Ada whitepaper appendix: FP16 / BF16 tensor with FP32 accumulate 97.5 dense (194.9 with FP16
#     accumulate), FP32 48.7, 716.8 GB/s, PCIe Gen4 x16.
#   RTX 5090 (GB202, sm_120): RTX Blackwell whitepaper / product page (170 SMs, 21,760 CUDA cores, 2.407 GHz,
#     512-bit 28 Gbps GDDR7): FP16 / BF16 tensor 419 dense with FP16 accumulate -> 209.5 with FP32 accumulate
#     (GeForce), FP32 104.8, 1,792 GB/s, PCIe Gen5 x16.
#   RTX 2080 Ti (TU102, reference clocks): Turing whitepaper table 1: FP16 tensor with FP32 accumulate 53.8 (107.6
#     with FP16 accumulate; Founders Edition 56.9), FP32 13.4, 616 GB/s, PCIe Gen3 x16; no bf16 (sm_75).
#   Tesla P100 PCIe 16 GB (sm_60, no tensor cores): P100 datasheet: FP32 9.3, FP16 18.7 (half2 FMAs, which
#     accumulate in fp16), 732 GB/s HBM2, PCIe Gen3 x16. PyTorch's fp16 GEMM asks cuBLAS for fp32 compute
#     (cublasGemmEx, CUDA_R_32F, aten/src/ATen/cuda/CUDABlas.cpp), which on Pascal runs on the FP32 units: the fp16
#     column holds 9.3, not 18.7 (fp16 halves the bytes moved, not the matmul time).
#   RTX A4000 / RTX A5000 (GA104 / GA102, workstation: full-rate FP32 accumulate): datasheets (tensor 153.4 / 222.2
#     with sparsity -> 76.7 / 111.1, FP32 19.2 / 27.8, 448 / 768 GB/s, PCIe Gen4 x16; the A5000's NVLink bridge joins
#     two cards only: PCIe is used).
# Compute capabilities: NVIDIA's CUDA GPUs list (A40 / RTX A6000 8.6; L40 / L40S / RTX 6000 Ada 8.9; H100 9.0;
# B200 10.0; P100 6.0; RTX 2080 Ti 7.5; RTX 30xx / A4000 / A5000 8.6; RTX 40xx 8.9; RTX 5090 12.0).
# NVLink figures are both directions together: a GPU sends at half (link_gbs). PCIe Gen3 x16 moves 15.75
# GB/s per direction, Gen4 x16 31.5, Gen5 x16 63.
#
# `usable_bytes`: the total PyTorch reports for the card ("GPU 0 has a total capacity of X GiB" in its
# out-of-memory message, cudaMemGetInfo's total), quoted from public logs:
#   L40S 44.39 GiB (also 44.42 with an older driver): OOM logs of L40S runs (vLLM / Axolotl on L40S,
#     stepfun-ai/Step-Video-T2V#8); nvidia-smi total 46068MiB (modal-labs/modal-client#2797).
#   L40 44.40: QwenLM/Qwen3-VL#2097 ("single L40 GPU").
#   A40 44.34: camptocamp/self-hosted-llm-models-tests README (Exoscale GPU3 = A40, TGI OOM); nvidia-smi
#     total 46068MiB (sgl-project/sglang#1522).
#   RTX A6000 47.54: prime-rl nightly benchmark (2xA6000 OOM); ECC off, as the card ships.
#   RTX 6000 Ada 44.43: DINGYANB/MTVCrafter#21 (nvidia-smi 46068MiB: ECC on, which takes 1/16 of GDDR6; with
#     ECC off the driver reports 49140MiB, about 3 GiB more: the table errs on the small side).
#   H100 PCIe 79.19: an OOM log of a run printed as "model=NVIDIA H100 PCIe"; nvidia-smi 81559MiB (the SXM's).
#   H100 NVL 93.00: ali-vilab/VACE#56 (RunPod H100 NVL).
#   B200 178.35: OOM logs on B200 (stas00/ml-engineering's OOM example, prime-rl 8xB200: 178.36).
#   A100 PCIe 40 / 80 GB: no measured total found; nvidia-smi reports the SXM cards' 40960 / 81920MiB for
#     them, so the SXM entries' figures are used (inferred).
#   RTX 3060 12 GB 11.76: TencentARC/PhotoMaker#47 (Linux; 11.75 in Kunhao-Liu/StyleGaussian#12).
#   RTX 3080 10 GB 9.78: zai-org/CogVideo#34 (Linux, run with sudo sh); Windows prints 10.00 (victordibia/peacasso#3).
#   RTX 2080 Ti 10.76: JDAI-CV/image-captioning#11, ispc-lab/TMA#5.
#   RTX 5090 31.36: TrajectoryCrafter/TrajectoryCrafter#20 (run from a tty).
#   RTX A4000 15.61: DengKaiCQ/VGGT-Long#6.
#   Inferred, no log of the card found: RTX 3080 12 GB 11.76 (the 3060 12 GB's Ampere total); RTX 3060 8 GB 7.78
#     (the RTX 3070 8 GB's, akshitac8/OW-DETR#46); RTX 4060 Ti 8 GB 7.75 (the RTX 4060 8 GB's, ESRSchao/EdgeRegNet#2);
#     RTX 4070 11.64 and RTX 4060 Ti 16 GB / 4070 Ti SUPER / 4080 15.64 (nominal less the 4090's 0.36 GiB on Linux;
#     Windows logs of a 4080 print 15.99, aigc-apps/sd-webui-EasyPhoto#281); RTX A5000 23.69 (the 3090's: GA102, 24 GB,
#     ECC off as shipped); P100 15.89 (nvidia-smi's 16280MiB; an unattributed notebook log prints the same 15.89,
#     andimarafioti/florence2-finetuning#17).
# `context_bytes` / `workspace_bytes` of the new cards are not measured: each takes the figure of the existing
# card of its architecture (Ampere sm86 as the 3090 / A10, Ada as the 4090 / L4, A100 PCIe as A100 SXM,
# H100 PCIe / NVL as H100 SXM; B200 as Hopper, whose 32 MiB cuBLAS workspace PyTorch also gives sm100). Of the
# home cards: RTX 30xx / A4000 / A5000 as the 3090 (Ampere sm86), RTX 40xx as the 4090 (Ada), RTX 2080 Ti as the
# Quadro RTX 6000 (the same TU102), RTX 5090 as the B200 (Blackwell; its 32 MiB workspace errs on the small side of
# free memory), P100 as the V100 (the catalogue's only card older than Turing).
_NV = dict(interconnect="nvlink")
_P3 = dict(interconnect="pcie3", link_gbs=15.75)
_P4 = dict(interconnect="pcie4", link_gbs=31.5)
_P5 = dict(interconnect="pcie5", link_gbs=63.0)
GPUS: dict[str, GPUSpec] = {g.id: g for g in (
    GPUSpec("t4", "T4", 16 * GiB, (7, 5), False, 65, None, 320, int(15.0 * GiB), 370 * 2**20, 9 * 2**20,
            fp32_tflops=8.1, **_P3),
    GPUSpec("v100-16gb", "V100 16GB", 16 * GiB, (7, 0), False, 125, None, 900, int(15.77 * GiB), 420 * 2**20, 9 * 2**20,
            fp32_tflops=15.7, link_gbs=150, **_NV),
    GPUSpec("v100-32gb", "V100 32GB", 32 * GiB, (7, 0), False, 125, None, 900, int(31.74 * GiB), 420 * 2**20, 9 * 2**20,
            fp32_tflops=15.7, link_gbs=150, **_NV),
    GPUSpec("quadro-rtx-6000", "Quadro RTX 6000", 24 * GiB, (7, 5), False, 130.5, None, 672, int(23.65 * GiB),
            400 * 2**20, 9 * 2**20, fp32_tflops=16.3, **_P3),
    GPUSpec("rtx-3090", "RTX 3090", 24 * GiB, (8, 6), True, 71, 71, 936, int(23.69 * GiB), 450 * 2**20, 9 * 2**20,
            fp32_tflops=35.6, **_P4),
    GPUSpec("rtx-4090", "RTX 4090", 24 * GiB, (8, 9), True, 165.2, 165.2, 1008, int(23.64 * GiB), 480 * 2**20, 9 * 2**20,
            fp32_tflops=82.6, **_P4),
    GPUSpec("a10", "A10", 24 * GiB, (8, 6), True, 125, 125, 600, int(22.06 * GiB), 450 * 2**20, 9 * 2**20,
            fp32_tflops=31.2, **_P4),
    GPUSpec("l4", "L4", 24 * GiB, (8, 9), True, 121, 121, 300, int(22.03 * GiB), 480 * 2**20, 9 * 2**20,
            fp32_tflops=30.3, **_P4),
    GPUSpec("a100-40gb", "A100 40GB", 40 * GiB, (8, 0), True, 312, 312, 1555, int(39.39 * GiB), 500 * 2**20, 9 * 2**20,
            fp32_tflops=19.5, link_gbs=300, **_NV),
    GPUSpec("a100-80gb", "A100 80GB", 80 * GiB, (8, 0), True, 312, 312, 2039, int(79.15 * GiB), 500 * 2**20, 9 * 2**20,
            fp32_tflops=19.5, link_gbs=300, **_NV),
    GPUSpec("h100", "H100 SXM", 80 * GiB, (9, 0), True, 989, 989, 3350, int(79.11 * GiB), 520 * 2**20, 33 * 2**20,
            fp32_tflops=67, link_gbs=450, **_NV),
    GPUSpec("h200", "H200", 141 * GiB, (9, 0), True, 989, 989, 4800, int(139.8 * GiB), 520 * 2**20, 33 * 2**20,
            fp32_tflops=67, link_gbs=450, **_NV),
    GPUSpec("rtx-a6000", "RTX A6000", 48 * GiB, (8, 6), True, 154.8, 154.8, 768, int(47.54 * GiB), 450 * 2**20,
            9 * 2**20, fp32_tflops=38.7, **_P4),
    GPUSpec("a40", "A40", 48 * GiB, (8, 6), True, 149.7, 149.7, 696, int(44.34 * GiB), 450 * 2**20, 9 * 2**20,
            fp32_tflops=37.4, **_P4),
    GPUSpec("l40", "L40", 48 * GiB, (8, 9), True, 181.05, 181.05, 864, int(44.40 * GiB), 480 * 2**20, 9 * 2**20,
            fp32_tflops=90.5, **_P4),
    GPUSpec("l40s", "L40S", 48 * GiB, (8, 9), True, 362.05, 362.05, 864, int(44.39 * GiB), 480 * 2**20, 9 * 2**20,
            fp32_tflops=91.6, **_P4),
    GPUSpec("rtx-6000-ada", "RTX 6000 Ada", 48 * GiB, (8, 9), True, 364.2, 364.2, 960, int(44.43 * GiB),
            480 * 2**20, 9 * 2**20, fp32_tflops=91.1, **_P4),
    GPUSpec("a100-pcie-40gb", "A100 PCIe 40GB", 40 * GiB, (8, 0), True, 312, 312, 1555, int(39.39 * GiB),
            500 * 2**20, 9 * 2**20, fp32_tflops=19.5, **_P4),
    GPUSpec("a100-pcie-80gb", "A100 PCIe 80GB", 80 * GiB, (8, 0), True, 312, 312, 1935, int(79.15 * GiB),
            500 * 2**20, 9 * 2**20, fp32_tflops=19.5, **_P4),
    GPUSpec("h100-pcie", "H100 PCIe", 80 * GiB, (9, 0), True, 756.5, 756.5, 2000, int(79.19 * GiB), 520 * 2**20,
            33 * 2**20, fp32_tflops=51, **_P5),
    GPUSpec("h100-nvl", "H100 NVL", 94 * GiB, (9, 0), True, 835.5, 835.5, 3900, int(93.00 * GiB), 520 * 2**20,
            33 * 2**20, fp32_tflops=60, **_P5),
    GPUSpec("b200", "B200", 180 * GiB, (10, 0), True, 2250, 2250, 8000, int(178.35 * GiB), 520 * 2**20, 33 * 2**20,
            fp32_tflops=75, link_gbs=900, **_NV),
    # home cards; sized ids where the name was sold in several memory sizes (AMBIGUOUS), the name as the driver
    # prints it (without the size) so that _local_gpu_spec finds the entry on the machine itself
    GPUSpec("rtx-3060-12gb", "RTX 3060", 12 * GiB, (8, 6), True, 25.5, 25.5, 360, int(11.76 * GiB), 450 * 2**20,
            9 * 2**20, fp32_tflops=12.7, **_P4),
    GPUSpec("rtx-3060-8gb", "RTX 3060", 8 * GiB, (8, 6), True, 25.5, 25.5, 240, int(7.78 * GiB), 450 * 2**20,
            9 * 2**20, fp32_tflops=12.7, **_P4),
    GPUSpec("rtx-3080-10gb", "RTX 3080", 10 * GiB, (8, 6), True, 59.5, 59.5, 760, int(9.78 * GiB), 450 * 2**20,
            9 * 2**20, fp32_tflops=29.8, **_P4),
    GPUSpec("rtx-3080-12gb", "RTX 3080", 12 * GiB, (8, 6), True, 61.3, 61.3, 912, int(11.76 * GiB), 450 * 2**20,
            9 * 2**20, fp32_tflops=30.6, **_P4),
    GPUSpec("rtx-4060-ti-16gb", "RTX 4060 Ti", 16 * GiB, (8, 9), True, 44.1, 44.1, 288, int(15.64 * GiB), 480 * 2**20,
            9 * 2**20, fp32_tflops=22.1, interconnect="pcie4", link_gbs=15.75),
    GPUSpec("rtx-4060-ti-8gb", "RTX 4060 Ti", 8 * GiB, (8, 9), True, 44.1, 44.1, 288, int(7.75 * GiB), 480 * 2**20,
            9 * 2**20, fp32_tflops=22.1, interconnect="pcie4", link_gbs=15.75),
    GPUSpec("rtx-4070", "RTX 4070", 12 * GiB, (8, 9), True, 58.3, 58.3, 504, int(11.64 * GiB), 480 * 2**20, 9 * 2**20,
            fp32_tflops=29.1, **_P4),
    GPUSpec("rtx-4070-ti-super", "RTX 4070 Ti SUPER", 16 * GiB, (8, 9), True, 88.2, 88.2, 672, int(15.64 * GiB),
            480 * 2**20, 9 * 2**20, fp32_tflops=44.1, **_P4),
    GPUSpec("rtx-4080", "RTX 4080", 16 * GiB, (8, 9), True, 97.5, 97.5, 716.8, int(15.64 * GiB), 480 * 2**20,
            9 * 2**20, fp32_tflops=48.7, **_P4),
    GPUSpec("rtx-5090", "RTX 5090", 32 * GiB, (12, 0), True, 209.5, 209.5, 1792, int(31.36 * GiB), 520 * 2**20,
            33 * 2**20, fp32_tflops=104.8, **_P5),
    GPUSpec("rtx-2080-ti", "RTX 2080 Ti", 11 * GiB, (7, 5), False, 53.8, None, 616, int(10.76 * GiB), 400 * 2**20,
            9 * 2**20, fp32_tflops=13.4, **_P3),
    GPUSpec("p100", "Tesla P100", 16 * GiB, (6, 0), False, 9.3, None, 732, int(15.89 * GiB), 420 * 2**20, 9 * 2**20,
            fp32_tflops=9.3, **_P3),
    GPUSpec("rtx-a4000", "RTX A4000", 16 * GiB, (8, 6), True, 76.7, 76.7, 448, int(15.61 * GiB), 450 * 2**20,
            9 * 2**20, fp32_tflops=19.2, **_P4),
    GPUSpec("rtx-a5000", "RTX A5000", 24 * GiB, (8, 6), True, 111.1, 111.1, 768, int(23.69 * GiB), 450 * 2**20,
            9 * 2**20, fp32_tflops=27.8, **_P4),
)}
# Cards on a PCIe x8 link (the RTX 4060 Ti: "PCIe 4.0 x8" on NVIDIA's product page): half a x16 slot's rate, to the
# host and to the next GPU (Gen4 x8 = 15.75 GB/s per direction, the rate of Gen3 x16).
PCIE_X8 = frozenset({"rtx-4060-ti-16gb", "rtx-4060-ti-8gb"})

# Between nodes (`mmtune plan --nodes M`): one 200 Gb/s HDR InfiniBand adapter per node (NVIDIA ConnectX-6
# HDR product brief: 200 Gb/s per port) moves 25 GB/s per direction; collectives that cross nodes share it.
# `--node-link GBS` states another fabric (e.g. 400 Gb/s NDR = 50, eight NDR rails of a DGX H100 = 400).
NODE_LINK_GBS = 25.0
NODE_LINK_NAME = "200 Gb/s InfiniBand (one HDR adapter per node)"

ALIASES = {"h100-80gb": "h100", "rtx6000": "quadro-rtx-6000", "3090": "rtx-3090", "4090": "rtx-4090",
           "h100-sxm": "h100", "h100-pcie-80gb": "h100-pcie", "h100-nvl-94gb": "h100-nvl", "a6000": "rtx-a6000",
           "rtx-a6000-48gb": "rtx-a6000", "6000-ada": "rtx-6000-ada", "rtx6000-ada": "rtx-6000-ada",
           "rtx-6000-ada-generation": "rtx-6000-ada", "l40s-48gb": "l40s", "a40-48gb": "a40",
           "a100-40gb-pcie": "a100-pcie-40gb", "a100-80gb-pcie": "a100-pcie-80gb", "b200-180gb": "b200",
           "3060-12gb": "rtx-3060-12gb", "rtx3060-12gb": "rtx-3060-12gb", "3060-8gb": "rtx-3060-8gb",
           "rtx3060-8gb": "rtx-3060-8gb", "3080-10gb": "rtx-3080-10gb", "rtx3080-10gb": "rtx-3080-10gb",
           "3080-12gb": "rtx-3080-12gb", "rtx3080-12gb": "rtx-3080-12gb", "4060ti-16gb": "rtx-4060-ti-16gb",
           "4060-ti-16gb": "rtx-4060-ti-16gb", "rtx-4060ti-16gb": "rtx-4060-ti-16gb", "rtx4060ti-16gb": "rtx-4060-ti-16gb",
           "4060ti-8gb": "rtx-4060-ti-8gb", "4060-ti-8gb": "rtx-4060-ti-8gb", "rtx-4060ti-8gb": "rtx-4060-ti-8gb",
           "rtx4060ti-8gb": "rtx-4060-ti-8gb", "4070": "rtx-4070", "rtx4070": "rtx-4070", "rtx-4070-12gb": "rtx-4070",
           "4070-ti-super": "rtx-4070-ti-super", "4070ti-super": "rtx-4070-ti-super",
           "rtx-4070ti-super": "rtx-4070-ti-super", "rtx4070ti-super": "rtx-4070-ti-super", "4080": "rtx-4080",
           "rtx4080": "rtx-4080", "rtx-4080-16gb": "rtx-4080", "5090": "rtx-5090", "rtx5090": "rtx-5090",
           "rtx-5090-32gb": "rtx-5090", "2080ti": "rtx-2080-ti", "2080-ti": "rtx-2080-ti", "rtx2080ti": "rtx-2080-ti",
           "rtx-2080ti": "rtx-2080-ti", "p100-16gb": "p100", "tesla-p100": "p100", "p100-pcie": "p100",
           "p100-pcie-16gb": "p100", "tesla-p100-pcie-16gb": "p100", "a4000": "rtx-a4000", "rtx-a4000-16gb": "rtx-a4000",
           "a5000": "rtx-a5000", "rtx-a5000-24gb": "rtx-a5000"}
# Names sold in more than one memory size: a plan for the wrong one is off by half the card, so the
# size must be said (`--gpu a100` used to mean the 80 GB card without a word). "RTX 6000" is both the
# 24 GB Turing Quadro and the 48 GB Ada card (`rtx6000`, without the space, stays the Quadro's alias).
AMBIGUOUS = {"a100": ("a100-40gb", "a100-80gb"), "v100": ("v100-16gb", "v100-32gb"),
             "a100-pcie": ("a100-pcie-40gb", "a100-pcie-80gb"), "rtx-6000": ("quadro-rtx-6000", "rtx-6000-ada")}
# GeForce names sold in two sizes (NVIDIA's product pages: the RTX 3060 in 12 GB and, later, 8 GB on a 128-bit bus;
# the RTX 3080 in 10 GB and 12 GB; the RTX 4060 Ti in 8 GB and 16 GB), with the spellings people type.
for _names, _sizes in ((("rtx-3060", "3060", "rtx3060"), ("rtx-3060-8gb", "rtx-3060-12gb")),
                       (("rtx-3080", "3080", "rtx3080"), ("rtx-3080-10gb", "rtx-3080-12gb")),
                       (("rtx-4060-ti", "4060ti", "4060-ti", "rtx4060ti", "rtx-4060ti"),
                        ("rtx-4060-ti-8gb", "rtx-4060-ti-16gb"))):
    AMBIGUOUS.update(dict.fromkeys(_names, _sizes))


def get_gpu(name: str) -> GPUSpec:
    """The spec of a GPU id (case-insensitive, `_`/` ` read as `-`); ConfigError with a did-you-mean."""
    key = name.strip().lower().replace("_", "-").replace(" ", "-")
    key = ALIASES.get(key, key)
    if key in GPUS:
        return GPUS[key]
    from .errors import ConfigError

    if key in AMBIGUOUS:
        choices = AMBIGUOUS[key]
        raise ConfigError(f"GPU {name!r} comes in {len(choices)} memory sizes", where="--gpu / train.gpu",
                          fix="say which: " + " or ".join(f"{c} ({GPUS[c].memory_bytes // GiB} GB)" for c in choices))

    close = difflib.get_close_matches(key, list(GPUS) + list(ALIASES), n=1)
    raise ConfigError(f"unknown GPU {name!r}", where="--gpu / train.gpu",
                      fix=(f"did you mean {close[0]!r}? " if close else "") + f"known: {', '.join(GPUS)}")


# The GPU's link to host memory (CPU offload: plan/offload.py), GB/s per direction, a PCIe x16 slot of the
# card's generation (PCI-SIG: Gen3 x16 15.75, Gen4 x16 31.5, Gen5 x16 63 GB/s per direction). The vendor sheets
# name the generation: T4, V100 (host side of the SXM2 board), Quadro RTX 6000: PCIe Gen3 x16; RTX 3090 / 4090,
# A10, L4: PCIe Gen4 x16; A100 SXM: "PCIe Gen4 64 GB/s" (both directions); H100 SXM / H200: "PCIe Gen5 128 GB/s"
# (both directions); RTX A6000, A40, L40, L40S, RTX 6000 Ada, A100 PCIe: PCIe Gen4 x16; H100 PCIe / NVL:
# "PCIe Gen5 128 GB/s"; HGX B200: PCIe Gen5 x16 to the host. Independent of `link_gbs` (GPU to GPU, NVLink on
# SXM boards).
HOST_LINK_GBS = {"t4": 15.75, "v100-16gb": 15.75, "v100-32gb": 15.75, "quadro-rtx-6000": 15.75, "rtx-3090": 31.5,
                 "rtx-4090": 31.5, "a10": 31.5, "l4": 31.5, "a100-40gb": 31.5, "a100-80gb": 31.5, "h100": 63.0,
                 "h200": 63.0, "rtx-a6000": 31.5, "a40": 31.5, "l40": 31.5, "l40s": 31.5, "rtx-6000-ada": 31.5,
                 "a100-pcie-40gb": 31.5, "a100-pcie-80gb": 31.5, "h100-pcie": 63.0, "h100-nvl": 63.0, "b200": 63.0,
                 "p100": 15.75, "rtx-2080-ti": 15.75, "rtx-5090": 63.0}
# the home cards' sheets: P100, RTX 2080 Ti PCIe Gen3 x16; RTX 5090 Gen5 x16; RTX 4060 Ti Gen4 x8; the others Gen4 x16
HOST_LINK_GBS.update({g: (15.75 if g in PCIE_X8 else 31.5) for g in GPUS if g not in HOST_LINK_GBS})


def host_link_gbs(spec: GPUSpec) -> float:
    """GB/s per direction between the GPU and host memory; a GPU not in the catalog: PCIe Gen3 x16 (the
    slowest link a training GPU sits on, so an offload plan for it errs on the slow side)."""
    return HOST_LINK_GBS.get(spec.id, 15.75)
