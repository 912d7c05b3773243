/* stream_fault_program.c - a program of fault group of tests/faults/faults_stream.py: being written. */
#include <stdio.h>

int main(void) {
  fputs("stream_fault_program: not written yet\n", stderr);
  return 1;
}
