	.amdgcn_target "amdgcn-amd-amdhsa--gfx950"
	.text
	.globl	attn_fwd_kernel
attn_fwd_kernel:
	s_load_dwordx4 s[0:3], s[0:1], 0x0
	global_load_dwordx4 v[0:3], v4, s[0:1]
	v_mul_f32_e32 v0, v0, v0
	v_cmp_gt_f32_e32 vcc, 0xc2fc0000, v0
	v_cndmask_b32_e64 v1, 0, 0x42800000, vcc
	v_add_f32_e32 v0, v0, v1
	v_exp_f32_e32 v0, v0
	v_ldexp_f32 v0, v0, v2
	v_add_f32_e32 v0, v0, v1
	global_store_dwordx4 v4, v[0:3], s[2:3]
	s_endpgm
; NumSgprs: 18
; NumVgprs: 36
; ScratchSize: 0
; Occupancy: 8
