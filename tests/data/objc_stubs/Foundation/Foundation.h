/* Minimal stand-ins, written for tests/repo/test_metal_objc.py: the few Foundation declarations
 * native/src/backend/metal/metal.m uses, so that clang can syntax-check it (ARC, -Wall -Wextra
 * -Werror) on Linux. NOT Apple's headers and not a compile: they say nothing about whether the
 * real SDK accepts metal.m; that is for the macOS workflow (.github/workflows/macos.yml). */
#pragma once
#include <stdint.h>
typedef unsigned long NSUInteger; typedef long NSInteger; typedef signed char BOOL;
typedef const void *CFTypeRef;
#define nil ((id)0)
@class NSString;
@protocol NSObject @end
__attribute__((objc_root_class)) @interface NSObject <NSObject> { Class isa; }
+ (instancetype)new; + (instancetype)alloc; - (instancetype)init; @end
@interface NSString : NSObject
+ (instancetype)stringWithUTF8String:(const char *)s;
@property (readonly) const char *UTF8String;
@end
typedef struct { unsigned long state; id __unsafe_unretained *itemsPtr; unsigned long *mutationsPtr; unsigned long extra[5]; } NSFastEnumerationState;
@protocol NSFastEnumeration
- (NSUInteger)countByEnumeratingWithState:(NSFastEnumerationState *)state objects:(id __unsafe_unretained [])buffer count:(NSUInteger)len;
@end
@interface NSArray<ObjectType> : NSObject <NSFastEnumeration>
@property (readonly) NSUInteger count;
- (ObjectType)objectAtIndexedSubscript:(NSUInteger)idx;
@end
@interface NSError : NSObject
@property (readonly, copy) NSString *localizedDescription;
@end
static inline CFTypeRef CFBridgingRetain(id X) { return (__bridge_retained CFTypeRef)X; }
static inline id CFBridgingRelease(CFTypeRef X) { return (__bridge_transfer id)X; }
