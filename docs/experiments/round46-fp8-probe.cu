// Round 46 probe (docs/performance.md): throughput of the exact FP8 -> f16 conversion
// (cvt.rn.f16x2.e4m3x2) against an integer bit conversion, of mma.sync m16n8k32 e4m3 and m16n8k16
// f16, and the accuracy of 448-dim dot products by e4m3 mma.sync with a fresh accumulator per mma
// (Q split into two e4m3 terms, sums in double on the host) against the exact products.
// Standalone: nvcc -O2 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o probe round46-fp8-probe.cu
// Throughput and accuracy probes: cvt e4m3x2->f16x2, integer fp8->f16, mma fp8/f16.
#include <cstdio>
#include <cstdint>
#include <cmath>
#include <vector>
#include <random>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
__global__ void k_cvt(uint32_t* out, int iters, uint32_t seed) {
  uint32_t r[8]; for (int i=0;i<8;++i) r[i] = seed*(threadIdx.x+i*7+1);
  uint32_t acc[8] = {0};
  for (int it=0; it<iters; ++it) {
#pragma unroll
    for (int i=0;i<8;++i) {
      uint32_t d;
      asm volatile("{.reg .b16 lo, hi;\nmov.b32 {lo,hi}, %1;\ncvt.rn.f16x2.e4m3x2 %0, lo;\n}" : "=r"(d) : "r"(r[i]));
      acc[i] ^= d; r[i] += 0x01010101u;
    }
  }
  uint32_t x=0; for (int i=0;i<8;++i) x^=acc[i]; out[blockIdx.x*blockDim.x+threadIdx.x]=x;
}
__global__ void k_int(uint32_t* out, int iters, uint32_t seed) {
  uint32_t r[8]; for (int i=0;i<8;++i) r[i] = seed*(threadIdx.x+i*7+1);
  uint32_t acc[8] = {0};
  for (int it=0; it<iters; ++it) {
#pragma unroll
    for (int i=0;i<8;++i) {
      uint32_t x = __byte_perm(r[i], 0, 0x1404);  // b0<<8 | b1<<24
      uint32_t y = x & 0x7f007f00u;
      uint32_t d = (y >> 1) | (x & 0x80008000u);
      acc[i] ^= d; r[i] += 0x01010101u;
    }
  }
  uint32_t x=0; for (int i=0;i<8;++i) x^=acc[i]; out[blockIdx.x*blockDim.x+threadIdx.x]=x;
}
__global__ void k_mma8(float* out, int iters) {
  float d[8][4] = {}; uint32_t a[4] = {0x38383838u+threadIdx.x,0x38383838u,0x38383838u,0x38383838u}, b0=0x30303030u, b1=0x30303030u;
  for (int it=0; it<iters; ++it) {
#pragma unroll
    for (int i=0;i<8;++i)
      asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[i][0]), "+f"(d[i][1]), "+f"(d[i][2]), "+f"(d[i][3]) : "r"(a[0]),"r"(a[1]),"r"(a[2]),"r"(a[3]),"r"(b0),"r"(b1));
  }
  float s=0; for(int i=0;i<8;++i) s+=d[i][0]+d[i][3]; out[blockIdx.x*blockDim.x+threadIdx.x]=s;
}
__global__ void k_mma16(float* out, int iters) {
  float d[8][4] = {}; uint32_t a[4] = {0x3c003c00u+threadIdx.x,0x3c003c00u,0x3c003c00u,0x3c003c00u}, b0=0x3c003c00u, b1=0x3c003c00u;
  for (int it=0; it<iters; ++it) {
#pragma unroll
    for (int i=0;i<8;++i)
      asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[i][0]), "+f"(d[i][1]), "+f"(d[i][2]), "+f"(d[i][3]) : "r"(a[0]),"r"(a[1]),"r"(a[2]),"r"(a[3]),"r"(b0),"r"(b1));
  }
  float s=0; for(int i=0;i<8;++i) s+=d[i][0]+d[i][3]; out[blockIdx.x*blockDim.x+threadIdx.x]=s;
}
// Accuracy: one warp, A = 16 rows x 32 k (fp8 bytes), B = 32 k x 8 cols (fp8), D fresh; out 16x8.
__global__ void k_acc(const uint8_t* A, const uint8_t* B, float* out, int groups) {
  int lane = threadIdx.x, g = lane/4, t = lane%4;
  for (int gi = 0; gi < groups; ++gi) {
    const uint8_t* a = A + gi*16*32; const uint8_t* b = B + gi*8*32;
    uint32_t ar[4], br[2];
    ar[0] = *(const uint32_t*)(a + g*32 + 4*t);
    ar[1] = *(const uint32_t*)(a + (g+8)*32 + 4*t);
    ar[2] = *(const uint32_t*)(a + g*32 + 16 + 4*t);
    ar[3] = *(const uint32_t*)(a + (g+8)*32 + 16 + 4*t);
    br[0] = *(const uint32_t*)(b + g*32 + 4*t);   // B stored [n][k]
    br[1] = *(const uint32_t*)(b + g*32 + 16 + 4*t);
    float d[4] = {0,0,0,0};
    asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) : "r"(ar[0]),"r"(ar[1]),"r"(ar[2]),"r"(ar[3]),"r"(br[0]),"r"(br[1]));
    float* o = out + gi*128;
    o[g*8 + 2*t] = d[0]; o[g*8+2*t+1] = d[1]; o[(g+8)*8+2*t] = d[2]; o[(g+8)*8+2*t+1] = d[3];
  }
}
static double e4m3(uint8_t b) { int s=b>>7, e=(b>>3)&15, m=b&7; double v = e? std::ldexp(1.0+m/8.0, e-7) : std::ldexp(m/8.0,-6); return s?-v:v; }
static uint8_t to_e4m3(double x) { // RNE brute force
  uint8_t best=0; double bd=1e300; for (int b=0;b<256;++b){ if ((b&0x7f)==0x7f) continue; double d=std::fabs(e4m3(b)-x); if (d<bd){bd=d;best=b;} } return best; }
int main() {
  uint32_t* o; cudaMalloc(&o, 132*8*128*4*4);
  cudaEvent_t e0,e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  const int iters = 4096;
  auto time = [&](const char* name, auto launch, double ops_per_iter_thread) {
    launch(); cudaDeviceSynchronize();
    cudaEventRecord(e0); launch(); cudaEventRecord(e1); cudaEventSynchronize(e1);
    float ms; cudaEventElapsedTime(&ms, e0, e1);
    int clk; cudaDeviceGetAttribute(&clk, cudaDevAttrClockRate, 0);
    double warp_instr = 528.0*8*ops_per_iter_thread*iters; // 528 blocks x 8 warps
    double cycles = ms*1e-3*clk*1e3;  // at the reported max clock
    printf("%-6s %.3f ms  %.3f warp-instr/clk/SM (clock %d kHz)\n", name, ms, warp_instr/132.0/cycles, clk);
  };
  // 132 blocks x 256 threads
  time("cvt", [&]{ k_cvt<<<132*4,256>>>(o, iters, 3); }, 8);
  time("int", [&]{ k_int<<<132*4,256>>>(o, iters, 3); }, 8);
  time("mma8", [&]{ k_mma8<<<132*4,256>>>((float*)o, iters); }, 8);
  time("mma16", [&]{ k_mma16<<<132*4,256>>>((float*)o, iters); }, 8);
  // accuracy
  std::mt19937 rng(7); std::normal_distribution<double> nd(0,1);
  const int G = 14*64; // groups of 32 k
  std::vector<uint8_t> A(G*16*32), Bh(G*8*32), Bl(G*8*32);
  std::vector<double> Av(A.size()), Bv(Bh.size());
  for (size_t i=0;i<A.size();++i){ A[i]=to_e4m3(nd(rng)*16); Av[i]=e4m3(A[i]); }
  for (size_t i=0;i<Bh.size();++i){ double q = nd(rng); float qb = (float)q; uint32_t u; memcpy(&u,&qb,4); u&=0xffff0000u; memcpy(&qb,&u,4); // bf16 trunc
    double x = qb*64; Bh[i]=to_e4m3(x); Bl[i]=to_e4m3(x - e4m3(Bh[i])); Bv[i]=x; }
  uint8_t *dA,*dB; float* dO; cudaMalloc(&dA,A.size()); cudaMalloc(&dB,Bh.size()); cudaMalloc(&dO,G*128*4);
  cudaMemcpy(dA,A.data(),A.size(),cudaMemcpyHostToDevice);
  std::vector<float> Oh(G*128), Ol(G*128);
  cudaMemcpy(dB,Bh.data(),Bh.size(),cudaMemcpyHostToDevice); k_acc<<<1,32>>>(dA,dB,dO,G); cudaMemcpy(Oh.data(),dO,G*128*4,cudaMemcpyDeviceToHost);
  cudaMemcpy(dB,Bl.data(),Bl.size(),cudaMemcpyHostToDevice); k_acc<<<1,32>>>(dA,dB,dO,G); cudaMemcpy(Ol.data(),dO,G*128*4,cudaMemcpyDeviceToHost);
  // per (row, col) of 14 consecutive groups = 448-dim dot
  double sum_err=0, sum_err2=0, sum_ref2=0; int n=0;
  double sum_errh=0;
  for (int blk=0; blk<G/14; ++blk) for (int r=0;r<16;++r) for (int c=0;c<8;++c) {
    double ref=0, got=0, refh=0, goth=0;
    for (int k=0;k<14;++k){ int gi=blk*14+k; got += (double)Oh[gi*128+r*8+c] + (double)Ol[gi*128+r*8+c]; goth += Oh[gi*128+r*8+c];
      for (int d=0; d<32; ++d){ ref += Av[gi*512+r*32+d]*Bv[gi*256+c*32+d]; refh += Av[gi*512+r*32+d]*e4m3(Bh[gi*256+c*32+d]); } }
    double err = got-ref; sum_err+=err; sum_err2+=err*err; sum_ref2+=ref*ref; sum_errh += goth-refh; ++n;
  }
  printf("dot448: rms ref %.4g, mean err %.4g, rms err %.4g (rel rms %.3g, rel bias %.3g); hi-only exact-check mean err %.4g\n",
    std::sqrt(sum_ref2/n), sum_err/n, std::sqrt(sum_err2/n), std::sqrt(sum_err2/sum_ref2), (sum_err/n)/std::sqrt(sum_ref2/n), sum_errh/n);
  return 0;
}
