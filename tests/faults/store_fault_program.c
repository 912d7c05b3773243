/* store_fault_program.c - a program of fault group of tests/faults/faults_store.py: being written. */
#include <stdio.h>

int main(void) {
  fputs("store_fault_program: not written yet\n", stderr);
  return 1;
}
