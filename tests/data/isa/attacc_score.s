; AttAcc HBM3-PIM: score q*K^T of one head on channel 0 (one head per channel, pim_dram.md b.6)
; dhead = 128 fp16 = 256 B -> 8 x 32 B bursts broadcast into the GEMV buffers
        WRGB    0, 8
        ACTAB   0, 0            ; row 0 in every bank of channel 0
        MACAB   0, 0, 32        ; 32 column steps of 32 B in every bank
        MVSB    0, 2            ; partial sums to the softmax buffer
        PREA    0
        ACTAB   ch=0, row=1
        MACAB   ch=0, col=0, repeat=32
        MVSB    0, 2
        PREA    0
        BARRIER 0
        SFM     0, 128          ; softmax over 128 scores on the buffer die
        BARRIER 0
