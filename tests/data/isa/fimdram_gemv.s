; Samsung HBM-PIM (FIMDRAM) GEMV CRF kernel (PIMSimulator PIMKernel.cpp, pim_dram.md b.6)
; every column command in PIM mode advances the CRF PC by one data instruction
even:   MAC   GRF_B[0], EVEN_BANK, GRF_A[0], aam=1   ; GRF_B += bank x GRF_A
        JUMP  even, 7                                 ; 8 MACs, one per GRF_A register
odd:    MAC   GRF_B[0], ODD_BANK, GRF_A[0], aam=1
        JUMP  odd, 7
        NOP   0
        EXIT
