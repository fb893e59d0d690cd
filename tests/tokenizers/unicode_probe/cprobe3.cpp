#include <utf8proc.h>
#include <cstdio>
#include <cstdlib>
#include <string>
static void js(const unsigned char* s, long n){ putchar('"'); for(long i=0;i<n;){ utf8proc_int32_t c; auto k=utf8proc_iterate(s+i,n-i,&c); i+=k; printf("\\u%04x", 0); (void)c; } putchar('"'); }
int main(){
  const char* names[]={"nfc","nfd","nfkc","nfkd"};
  int opts[]={UTF8PROC_STABLE|UTF8PROC_COMPOSE, UTF8PROC_STABLE|UTF8PROC_DECOMPOSE, UTF8PROC_STABLE|UTF8PROC_COMPOSE|UTF8PROC_COMPAT, UTF8PROC_STABLE|UTF8PROC_DECOMPOSE|UTF8PROC_COMPAT};
  printf("{");
  for(int k=0;k<4;++k){ printf(k?",\"%s\":{":"\"%s\":{",names[k]); bool first=true;
    for(int c=0;c<0x110000;++c){ if(c>=0xD800&&c<=0xDFFF) continue; unsigned char b[4]; auto n=utf8proc_encode_char(c,b);
      unsigned char* out=nullptr; auto m=utf8proc_map(b,n,&out,(utf8proc_option_t)opts[k]);
      if(m!=n || memcmp(out,b,n)!=0){ printf(first?"\"%d\":[":",\"%d\":[",c); first=false; for(long i=0;i<m;){utf8proc_int32_t d; i+=utf8proc_iterate(out+i,m-i,&d); printf(i<m?"%d,":"%d",d);} printf("]"); }
      free(out);} printf("}"); }
  printf(",\"lower\":{"); bool first=true; for(int c=0;c<0x110000;++c){ if(c>=0xD800&&c<=0xDFFF) continue; int l=utf8proc_tolower(c); if(l!=c){printf(first?"\"%d\":[%d]":",\"%d\":[%d]",c,l); first=false;} } printf("}}\n");
}
