#pragma once
/* Stand-ins for the Metal declarations metal.m uses (see Foundation/Foundation.h here). */
#import <Foundation/Foundation.h>
@protocol MTLFunction <NSObject> @end
@protocol MTLLibrary <NSObject> - (id<MTLFunction>)newFunctionWithName:(NSString *)name; @end
@protocol MTLComputePipelineState <NSObject> @end
@protocol MTLBuffer <NSObject> @property (readonly) void *contents; @property (readonly) NSUInteger length; @end
@protocol MTLCommandQueue <NSObject> @end
typedef enum MTLLanguageVersion : NSUInteger { MTLLanguageVersion2_3 = (2 << 16) + 3 } MTLLanguageVersion;
typedef enum MTLResourceOptions : NSUInteger { MTLResourceStorageModeShared = 0 } MTLResourceOptions;
@interface MTLCompileOptions : NSObject @property (readwrite) MTLLanguageVersion languageVersion; @end
@protocol MTLDevice <NSObject>
@property (readonly) NSString *name;
@property (readonly) BOOL hasUnifiedMemory;
@property (readonly) NSUInteger maxBufferLength;
@property (readonly) uint64_t recommendedMaxWorkingSetSize;
- (id<MTLCommandQueue>)newCommandQueue;
- (id<MTLLibrary>)newLibraryWithSource:(NSString *)source options:(MTLCompileOptions *)options error:(NSError **)error;
- (id<MTLComputePipelineState>)newComputePipelineStateWithFunction:(id<MTLFunction>)f error:(NSError **)error;
- (id<MTLBuffer>)newBufferWithLength:(NSUInteger)length options:(MTLResourceOptions)options;
- (id<MTLBuffer>)newBufferWithBytesNoCopy:(void *)pointer length:(NSUInteger)length options:(MTLResourceOptions)options deallocator:(void (^)(void *pointer, NSUInteger length))deallocator;
@end
id<MTLDevice> MTLCreateSystemDefaultDevice(void);
NSArray<id<MTLDevice>> *MTLCopyAllDevices(void) __attribute__((ns_returns_retained));
