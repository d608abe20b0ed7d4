// Preloaded by benches/atlas_alloc_ab.sh (setting h5fl0): turns HDF5's free lists off before the
// program opens a file. The library keeps freed blocks of its own on these lists for reuse
// instead of returning them to malloc; limits of 0 hand each block back at once.
#include <stdio.h>
#include <hdf5.h>

__attribute__((constructor)) static void h5_free_lists_off(void) {
    if (H5set_free_list_limits(0, 0, 0, 0, 0, 0) < 0)
        fprintf(stderr, "h5_free_lists_off: H5set_free_list_limits failed\n");
}
