#include <utf8proc.h>
#include <cstdio>
int main(){ printf("["); for(int c=0;c<0x110000;++c){ printf(c?",%d":"%d", (c>=0xD800&&c<=0xDFFF)?-1:(int)utf8proc_category(c)); } printf("]\n"); }
