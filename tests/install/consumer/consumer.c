/* A program outside the tree: it sees only the installed header and library. Run under
 * `accel launch -n 2` it gathers the ranks' indices; alone it is a world of one. */
#include <accel/accel.h>
#include <stdio.h>

int main(void) {
  accel_accelerator* acc = NULL;
  accel_tensor *mine = NULL, *all = NULL;
  int32_t rank = 0, world = 0;
  int64_t value, gathered[64], numel = 0, i;
  size_t size = 0;
  if (accel_init(NULL, &acc) != ACCEL_OK) {
    fprintf(stderr, "init: %s\n", accel_last_error_message());
    return 1;
  }
  accel_process_index(acc, &rank);
  accel_num_processes(acc, &world);
  value = rank;
  if (accel_version_number() != ACCEL_VERSION_NUMBER) {
    fprintf(stderr, "header %d, library %s\n", ACCEL_VERSION_NUMBER, accel_version());
    return 4;
  }
  if (accel_tensor_from_data(&value, sizeof value, ACCEL_DTYPE_I64, NULL, 0, &mine) != ACCEL_OK ||
      accel_gather(acc, mine, &all) != ACCEL_OK ||
      accel_tensor_element_count(all, &numel) != ACCEL_OK ||
      accel_tensor_to_data(all, gathered, sizeof gathered, &size) != ACCEL_OK) {
    fprintf(stderr, "gather: %s\n", accel_last_error_message());
    return 1;
  }
  for (i = 0; i < numel; ++i)
    if (gathered[i] != i) return 2;
  if (rank == 0) printf("consumer ok: libaccel %s, %d ranks\n", accel_version(), (int)world);
  accel_tensor_free(mine);
  accel_tensor_free(all);
  accel_accelerator_free(acc);
  return numel == world ? 0 : 3;
}
