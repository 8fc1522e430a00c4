; CXL-PNM decode attention of one head: 4096 tokens, head dim 128, fp16 KV
        LOAD_VEC  0, 0x0, 128, FP16                        ; q
        GEMV      1, 0, 0x100000, 4096, 128, FP16, 0       ; scores = K q
        SOFTMAX   1, 4096
        GEMV      2, 1, 0x200000, 4096, 128, FP16, trans=1 ; out = V^T s
        STORE     2, 0x300000, 128, FP16
        BARRIER
        HALT
