; ModuleID = 'LLVMDialectModule'
target triple = "amdgcn-amd-amdhsa"

define amdgpu_kernel void @attn_fwd_kernel(ptr addrspace(1) %0, ptr addrspace(1) %1) {
  %3 = load <8 x bfloat>, ptr addrspace(1) %0, align 16
  %4 = fpext <8 x bfloat> %3 to <8 x float>
  %5 = fmul <8 x float> %4, %4
  %6 = fmul <8 x float> %5, splat (float 0x3FF7154760000000)
  %7 = call <8 x float> @llvm.exp2.v8f32(<8 x float> %6)
  %8 = fadd <8 x float> %7, %5
  store <8 x float> %8, ptr addrspace(1) %1, align 32
  ret void
}
