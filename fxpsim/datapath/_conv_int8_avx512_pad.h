/*
 * fxpsim/datapath/_conv_int8_avx512_pad.h -- the input layouts of the AVX-512 kernels: padded copies of x
 * (portable C, FXC_CLONES) and each output pixel's window offset.
 */
#ifndef FXPSIM_CONV_INT8_AVX512_PAD_H
#define FXPSIM_CONV_INT8_AVX512_PAD_H
#if FXC_AVX512

/* Padded copies of x for the AVX-512 kernels, [N][Hp][Wp][Cs]: rows of whole pixels, vectorised.
 * fxc_pad_i8: raw codes, `pad` outside the image, channels >= C zero (Cs >= C);
 * fxc_pad_i16: x - zx, 0 outside (Cs = C). */
FXC_CLONES static void fxc_pad_i8(const fxc_params *P, const int8_t *x, int8_t *dst, ptrdiff_t Hp, ptrdiff_t Wp,
                                  ptrdiff_t Cs, int8_t pad)
{
    const ptrdiff_t C = P->C;
    for (ptrdiff_t n = 0; n < P->N; n++)
        for (ptrdiff_t h = 0; h < Hp; h++) {
            int8_t *d = dst + (n * Hp + h) * Wp * Cs;
            const ptrdiff_t ih = h - P->pt;
            for (ptrdiff_t w = 0; w < Wp; w++) {
                const ptrdiff_t iw = w - P->pl;
                int8_t *dp = d + w * Cs;
                if (ih < 0 || ih >= P->H || iw < 0 || iw >= P->W) {
                    memset(dp, pad, (size_t)C);
                } else {
                    memcpy(dp, x + ((n * P->H + ih) * P->W + iw) * C, (size_t)C);
                }
                if (Cs > C)
                    memset(dp + C, 0, (size_t)(Cs - C));
            }
        }
}

FXC_CLONES static void fxc_pad_i16(const fxc_params *P, const int8_t *x, int16_t *dst, ptrdiff_t Hp, ptrdiff_t Wp)
{
    const ptrdiff_t C = P->C;
    const int16_t zx = (int16_t)P->x_zp;
    for (ptrdiff_t n = 0; n < P->N; n++)
        for (ptrdiff_t h = 0; h < Hp; h++) {
            int16_t *d = dst + (n * Hp + h) * Wp * C;
            const ptrdiff_t ih = h - P->pt;
            if (ih < 0 || ih >= P->H) {
                memset(d, 0, sizeof(int16_t) * (size_t)(Wp * C));
                continue;
            }
            /* columns w = pl + iw hold pixel iw for 0 <= iw < W */
            const ptrdiff_t w0 = P->pl < Wp ? P->pl : Wp;
            const ptrdiff_t w1 = P->pl + P->W < Wp ? P->pl + P->W : Wp;
            memset(d, 0, sizeof(int16_t) * (size_t)(w0 * C));
            const int8_t *src = x + (n * P->H + ih) * P->W * C;
            int16_t *dm = d + w0 * C;
            const ptrdiff_t len = (w1 - w0) * C;
            for (ptrdiff_t e = 0; e < len; e++)
                dm[e] = (int16_t)(src[e] - zx);
            memset(d + w1 * C, 0, sizeof(int16_t) * (size_t)((Wp - w1) * C));
        }
}

/* base[m]: offset of pixel m's window (its top-left tap) in an [N][Hb][Wb][Cs] buffer. */
static void fxc_bases(const fxc_params *P, ptrdiff_t *base, ptrdiff_t Hb, ptrdiff_t Wb, ptrdiff_t Cs)
{
    ptrdiff_t m = 0;
    for (ptrdiff_t n = 0; n < P->N; n++)
        for (ptrdiff_t p = 0; p < P->OH; p++)
            for (ptrdiff_t q = 0; q < P->OW; q++)
                base[m++] = ((n * Hb + p * P->sh) * Wb + q * P->sw) * Cs;
}

#endif /* FXC_AVX512 */
#endif /* FXPSIM_CONV_INT8_AVX512_PAD_H */
