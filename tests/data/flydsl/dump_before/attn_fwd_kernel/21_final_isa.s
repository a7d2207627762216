	.amdgcn_target "amdgcn-amd-amdhsa--gfx950"
	.text
	.globl	attn_fwd_kernel
attn_fwd_kernel:
	s_load_dwordx4 s[0:3], s[0:1], 0x0
	global_load_dwordx4 v[0:3], v4, s[0:1]
	v_mul_f32_e32 v0, v0, v0
	v_exp_f32_e32 v0, v0
	v_add_f32_e32 v0, v0, v1
	global_store_dwordx4 v4, v[0:3], s[2:3]
	s_endpgm
; NumSgprs: 18
; NumVgprs: 32
; ScratchSize: 0
; Occupancy: 8
