/* zero_fault_program.c - a program of fault group of tests/faults/faults_zero.py: being written. */
#include <stdio.h>

int main(void) {
  fputs("zero_fault_program: not written yet\n", stderr);
  return 1;
}
