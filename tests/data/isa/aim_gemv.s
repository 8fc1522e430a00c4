; SK hynix GDDR6-AiM GEMV on channels 0-3 (aim_simulator README ISR forms, pim_dram.md b.6)
        WR_GB    64, 0xf          ; 64 x 256 b input vector into the global buffers
        MAC_ABK  64, 0xf, 0       ; ACT16 row 0 + 64 MAC16
        MAC_ABK  64, 0xf, 1
        RD_MAC   0xf, 0           ; 16 per-bank sums -> GPR 0
        SYNC
        EOC
