package io.zkgate.v1;

import static io.grpc.MethodDescriptor.generateFullMethodName;

/**
 */
@javax.annotation.Generated(
    value = "by gRPC proto compiler",
    comments = "Source: zkgate/v1/election.proto")
@io.grpc.stub.annotations.GrpcGenerated
public final class ElectionGrpc {

  private ElectionGrpc() {}

  public static final String SERVICE_NAME = "zkgate.v1.Election";

  // Static method descriptors that strictly reflect the proto.
  private static volatile io.grpc.MethodDescriptor<io.zkgate.v1.CampaignRequest,
      io.zkgate.v1.CampaignResponse> getCampaignMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Campaign",
      requestType = io.zkgate.v1.CampaignRequest.class,
      responseType = io.zkgate.v1.CampaignResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.BIDI_STREAMING)
  public static io.grpc.MethodDescriptor<io.zkgate.v1.CampaignRequest,
      io.zkgate.v1.CampaignResponse> getCampaignMethod() {
    io.grpc.MethodDescriptor<io.zkgate.v1.CampaignRequest, io.zkgate.v1.CampaignResponse> getCampaignMethod;
    if ((getCampaignMethod = ElectionGrpc.getCampaignMethod) == null) {
      synchronized (ElectionGrpc.class) {
        if ((getCampaignMethod = ElectionGrpc.getCampaignMethod) == null) {
          ElectionGrpc.getCampaignMethod = getCampaignMethod =
              io.grpc.MethodDescriptor.<io.zkgate.v1.CampaignRequest, io.zkgate.v1.CampaignResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.BIDI_STREAMING)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Campaign"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.zkgate.v1.CampaignRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.zkgate.v1.CampaignResponse.getDefaultInstance()))
              .setSchemaDescriptor(new ElectionMethodDescriptorSupplier("Campaign"))
              .build();
        }
      }
    }
    return getCampaignMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.zkgate.v1.ProclaimRequest,
      io.zkgate.v1.ProclaimResponse> getProclaimMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Proclaim",
      requestType = io.zkgate.v1.ProclaimRequest.class,
      responseType = io.zkgate.v1.ProclaimResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.zkgate.v1.ProclaimRequest,
      io.zkgate.v1.ProclaimResponse> getProclaimMethod() {
    io.grpc.MethodDescriptor<io.zkgate.v1.ProclaimRequest, io.zkgate.v1.ProclaimResponse> getProclaimMethod;
    if ((getProclaimMethod = ElectionGrpc.getProclaimMethod) == null) {
      synchronized (ElectionGrpc.class) {
        if ((getProclaimMethod = ElectionGrpc.getProclaimMethod) == null) {
          ElectionGrpc.getProclaimMethod = getProclaimMethod =
              io.grpc.MethodDescriptor.<io.zkgate.v1.ProclaimRequest, io.zkgate.v1.ProclaimResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Proclaim"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.zkgate.v1.ProclaimRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.zkgate.v1.ProclaimResponse.getDefaultInstance()))
              .setSchemaDescriptor(new ElectionMethodDescriptorSupplier("Proclaim"))
              .build();
        }
      }
    }
    return getProclaimMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.zkgate.v1.ResignRequest,
      io.zkgate.v1.ResignResponse> getResignMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Resign",
      requestType = io.zkgate.v1.ResignRequest.class,
      responseType = io.zkgate.v1.ResignResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.zkgate.v1.ResignRequest,
      io.zkgate.v1.ResignResponse> getResignMethod() {
    io.grpc.MethodDescriptor<io.zkgate.v1.ResignRequest, io.zkgate.v1.ResignResponse> getResignMethod;
    if ((getResignMethod = ElectionGrpc.getResignMethod) == null) {
      synchronized (ElectionGrpc.class) {
        if ((getResignMethod = ElectionGrpc.getResignMethod) == null) {
          ElectionGrpc.getResignMethod = getResignMethod =
              io.grpc.MethodDescriptor.<io.zkgate.v1.ResignRequest, io.zkgate.v1.ResignResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Resign"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.zkgate.v1.ResignRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.zkgate.v1.ResignResponse.getDefaultInstance()))
              .setSchemaDescriptor(new ElectionMethodDescriptorSupplier("Resign"))
              .build();
        }
      }
    }
    return getResignMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.zkgate.v1.LeaderRequest,
      io.zkgate.v1.LeaderResponse> getLeaderMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Leader",
      requestType = io.zkgate.v1.LeaderRequest.class,
      responseType = io.zkgate.v1.LeaderResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.zkgate.v1.LeaderRequest,
      io.zkgate.v1.LeaderResponse> getLeaderMethod() {
    io.grpc.MethodDescriptor<io.zkgate.v1.LeaderRequest, io.zkgate.v1.LeaderResponse> getLeaderMethod;
    if ((getLeaderMethod = ElectionGrpc.getLeaderMethod) == null) {
      synchronized (ElectionGrpc.class) {
        if ((getLeaderMethod = ElectionGrpc.getLeaderMethod) == null) {
          ElectionGrpc.getLeaderMethod = getLeaderMethod =
              io.grpc.MethodDescriptor.<io.zkgate.v1.LeaderRequest, io.zkgate.v1.LeaderResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Leader"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.zkgate.v1.LeaderRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.zkgate.v1.LeaderResponse.getDefaultInstance()))
              .setSchemaDescriptor(new ElectionMethodDescriptorSupplier("Leader"))
              .build();
        }
      }
    }
    return getLeaderMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.zkgate.v1.ObserveRequest,
      io.zkgate.v1.ObserveResponse> getObserveMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Observe",
      requestType = io.zkgate.v1.ObserveRequest.class,
      responseType = io.zkgate.v1.ObserveResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.SERVER_STREAMING)
  public static io.grpc.MethodDescriptor<io.zkgate.v1.ObserveRequest,
      io.zkgate.v1.ObserveResponse> getObserveMethod() {
    io.grpc.MethodDescriptor<io.zkgate.v1.ObserveRequest, io.zkgate.v1.ObserveResponse> getObserveMethod;
    if ((getObserveMethod = ElectionGrpc.getObserveMethod) == null) {
      synchronized (ElectionGrpc.class) {
        if ((getObserveMethod = ElectionGrpc.getObserveMethod) == null) {
          ElectionGrpc.getObserveMethod = getObserveMethod =
              io.grpc.MethodDescriptor.<io.zkgate.v1.ObserveRequest, io.zkgate.v1.ObserveResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.SERVER_STREAMING)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Observe"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.zkgate.v1.ObserveRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.zkgate.v1.ObserveResponse.getDefaultInstance()))
              .setSchemaDescriptor(new ElectionMethodDescriptorSupplier("Observe"))
              .build();
        }
      }
    }
    return getObserveMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.zkgate.v1.CandidatesRequest,
      io.zkgate.v1.CandidatesResponse> getCandidatesMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Candidates",
      requestType = io.zkgate.v1.CandidatesRequest.class,
      responseType = io.zkgate.v1.CandidatesResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.zkgate.v1.CandidatesRequest,
      io.zkgate.v1.CandidatesResponse> getCandidatesMethod() {
    io.grpc.MethodDescriptor<io.zkgate.v1.CandidatesRequest, io.zkgate.v1.CandidatesResponse> getCandidatesMethod;
    if ((getCandidatesMethod = ElectionGrpc.getCandidatesMethod) == null) {
      synchronized (ElectionGrpc.class) {
        if ((getCandidatesMethod = ElectionGrpc.getCandidatesMethod) == null) {
          ElectionGrpc.getCandidatesMethod = getCandidatesMethod =
              io.grpc.MethodDescriptor.<io.zkgate.v1.CandidatesRequest, io.zkgate.v1.CandidatesResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Candidates"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.zkgate.v1.CandidatesRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.zkgate.v1.CandidatesResponse.getDefaultInstance()))
              .setSchemaDescriptor(new ElectionMethodDescriptorSupplier("Candidates"))
              .build();
        }
      }
    }
    return getCandidatesMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.zkgate.v1.ElectionValidateRequest,
      io.zkgate.v1.ElectionValidateResponse> getValidateMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Validate",
      requestType = io.zkgate.v1.ElectionValidateRequest.class,
      responseType = io.zkgate.v1.ElectionValidateResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.zkgate.v1.ElectionValidateRequest,
      io.zkgate.v1.ElectionValidateResponse> getValidateMethod() {
    io.grpc.MethodDescriptor<io.zkgate.v1.ElectionValidateRequest, io.zkgate.v1.ElectionValidateResponse> getValidateMethod;
    if ((getValidateMethod = ElectionGrpc.getValidateMethod) == null) {
      synchronized (ElectionGrpc.class) {
        if ((getValidateMethod = ElectionGrpc.getValidateMethod) == null) {
          ElectionGrpc.getValidateMethod = getValidateMethod =
              io.grpc.MethodDescriptor.<io.zkgate.v1.ElectionValidateRequest, io.zkgate.v1.ElectionValidateResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Validate"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.zkgate.v1.ElectionValidateRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.zkgate.v1.ElectionValidateResponse.getDefaultInstance()))
              .setSchemaDescriptor(new ElectionMethodDescriptorSupplier("Validate"))
              .build();
        }
      }
    }
    return getValidateMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.zkgate.v1.ObserveManyRequest,
      io.zkgate.v1.ObserveManyResponse> getObserveManyMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "ObserveMany",
      requestType = io.zkgate.v1.ObserveManyRequest.class,
      responseType = io.zkgate.v1.ObserveManyResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.SERVER_STREAMING)
  public static io.grpc.MethodDescriptor<io.zkgate.v1.ObserveManyRequest,
      io.zkgate.v1.ObserveManyResponse> getObserveManyMethod() {
    io.grpc.MethodDescriptor<io.zkgate.v1.ObserveManyRequest, io.zkgate.v1.ObserveManyResponse> getObserveManyMethod;
    if ((getObserveManyMethod = ElectionGrpc.getObserveManyMethod) == null) {
      synchronized (ElectionGrpc.class) {
        if ((getObserveManyMethod = ElectionGrpc.getObserveManyMethod) == null) {
          ElectionGrpc.getObserveManyMethod = getObserveManyMethod =
              io.grpc.MethodDescriptor.<io.zkgate.v1.ObserveManyRequest, io.zkgate.v1.ObserveManyResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.SERVER_STREAMING)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "ObserveMany"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.zkgate.v1.ObserveManyRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.zkgate.v1.ObserveManyResponse.getDefaultInstance()))
              .setSchemaDescriptor(new ElectionMethodDescriptorSupplier("ObserveMany"))
              .build();
        }
      }
    }
    return getObserveManyMethod;
  }

  /**
   * Creates a new async stub that supports all call types for the service
   */
  public static ElectionStub newStub(io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<ElectionStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<ElectionStub>() {
        @java.lang.Override
        public ElectionStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new ElectionStub(channel, callOptions);
        }
      };
    return ElectionStub.newStub(factory, channel);
  }

  /**
   * Creates a new blocking-style stub that supports unary and streaming output calls on the service
   */
  public static ElectionBlockingStub newBlockingStub(
      io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<ElectionBlockingStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<ElectionBlockingStub>() {
        @java.lang.Override
        public ElectionBlockingStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new ElectionBlockingStub(channel, callOptions);
        }
      };
    return ElectionBlockingStub.newStub(factory, channel);
  }

  /**
   * Creates a new ListenableFuture-style stub that supports unary calls on the service
   */
  public static ElectionFutureStub newFutureStub(
      io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<ElectionFutureStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<ElectionFutureStub>() {
        @java.lang.Override
        public ElectionFutureStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new ElectionFutureStub(channel, callOptions);
        }
      };
    return ElectionFutureStub.newStub(factory, channel);
  }

  /**
   */
  public static abstract class ElectionImplBase implements io.grpc.BindableService {

    /**
     * <pre>
     * Join an election and stay a candidate while the stream is open. The first message must be
     * `join`; later ones may be `proclaim` or `resign`. Half-closing the request side keeps the
     * candidacy; cancelling the call or losing the connection ends it.
     * </pre>
     */
    public io.grpc.stub.StreamObserver<io.zkgate.v1.CampaignRequest> campaign(
        io.grpc.stub.StreamObserver<io.zkgate.v1.CampaignResponse> responseObserver) {
      return io.grpc.stub.ServerCalls.asyncUnimplementedStreamingCall(getCampaignMethod(), responseObserver);
    }

    /**
     * <pre>
     * The current leader replaces its value without a new election.
     * </pre>
     */
    public void proclaim(io.zkgate.v1.ProclaimRequest request,
        io.grpc.stub.StreamObserver<io.zkgate.v1.ProclaimResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getProclaimMethod(), responseObserver);
    }

    /**
     * <pre>
     * Leave the election from any gateway, by lease.
     * </pre>
     */
    public void resign(io.zkgate.v1.ResignRequest request,
        io.grpc.stub.StreamObserver<io.zkgate.v1.ResignResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getResignMethod(), responseObserver);
    }

    /**
     * <pre>
     * Who leads now; NOT_FOUND when nobody does.
     * </pre>
     */
    public void leader(io.zkgate.v1.LeaderRequest request,
        io.grpc.stub.StreamObserver<io.zkgate.v1.LeaderResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getLeaderMethod(), responseObserver);
    }

    /**
     * <pre>
     * The current state first (leader, or `leader` unset when vacant), then one message per change.
     * </pre>
     */
    public void observe(io.zkgate.v1.ObserveRequest request,
        io.grpc.stub.StreamObserver<io.zkgate.v1.ObserveResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getObserveMethod(), responseObserver);
    }

    /**
     * <pre>
     * The queue in order, for operators.
     * </pre>
     */
    public void candidates(io.zkgate.v1.CandidatesRequest request,
        io.grpc.stub.StreamObserver<io.zkgate.v1.CandidatesResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getCandidatesMethod(), responseObserver);
    }

    /**
     * <pre>
     * Is this fencing token the current leader's?
     * </pre>
     */
    public void validate(io.zkgate.v1.ElectionValidateRequest request,
        io.grpc.stub.StreamObserver<io.zkgate.v1.ElectionValidateResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getValidateMethod(), responseObserver);
    }

    /**
     * <pre>
     * One stream for many elections: every election whose name starts with `prefix` (elections
     * that appear later included) plus every name in `elections`. First one `state` per election
     * (`leader` unset when vacant), then `snapshot_complete`, then one `state` per change.
     * </pre>
     */
    public void observeMany(io.zkgate.v1.ObserveManyRequest request,
        io.grpc.stub.StreamObserver<io.zkgate.v1.ObserveManyResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getObserveManyMethod(), responseObserver);
    }

    @java.lang.Override public final io.grpc.ServerServiceDefinition bindService() {
      return io.grpc.ServerServiceDefinition.builder(getServiceDescriptor())
          .addMethod(
            getCampaignMethod(),
            io.grpc.stub.ServerCalls.asyncBidiStreamingCall(
              new MethodHandlers<
                io.zkgate.v1.CampaignRequest,
                io.zkgate.v1.CampaignResponse>(
                  this, METHODID_CAMPAIGN)))
          .addMethod(
            getProclaimMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.zkgate.v1.ProclaimRequest,
                io.zkgate.v1.ProclaimResponse>(
                  this, METHODID_PROCLAIM)))
          .addMethod(
            getResignMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.zkgate.v1.ResignRequest,
                io.zkgate.v1.ResignResponse>(
                  this, METHODID_RESIGN)))
          .addMethod(
            getLeaderMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.zkgate.v1.LeaderRequest,
                io.zkgate.v1.LeaderResponse>(
                  this, METHODID_LEADER)))
          .addMethod(
            getObserveMethod(),
            io.grpc.stub.ServerCalls.asyncServerStreamingCall(
              new MethodHandlers<
                io.zkgate.v1.ObserveRequest,
                io.zkgate.v1.ObserveResponse>(
                  this, METHODID_OBSERVE)))
          .addMethod(
            getCandidatesMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.zkgate.v1.CandidatesRequest,
                io.zkgate.v1.CandidatesResponse>(
                  this, METHODID_CANDIDATES)))
          .addMethod(
            getValidateMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.zkgate.v1.ElectionValidateRequest,
                io.zkgate.v1.ElectionValidateResponse>(
                  this, METHODID_VALIDATE)))
          .addMethod(
            getObserveManyMethod(),
            io.grpc.stub.ServerCalls.asyncServerStreamingCall(
              new MethodHandlers<
                io.zkgate.v1.ObserveManyRequest,
                io.zkgate.v1.ObserveManyResponse>(
                  this, METHODID_OBSERVE_MANY)))
          .build();
    }
  }

  /**
   */
  public static final class ElectionStub extends io.grpc.stub.AbstractAsyncStub<ElectionStub> {
    private ElectionStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected ElectionStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new ElectionStub(channel, callOptions);
    }

    /**
     * <pre>
     * Join an election and stay a candidate while the stream is open. The first message must be
     * `join`; later ones may be `proclaim` or `resign`. Half-closing the request side keeps the
     * candidacy; cancelling the call or losing the connection ends it.
     * </pre>
     */
    public io.grpc.stub.StreamObserver<io.zkgate.v1.CampaignRequest> campaign(
        io.grpc.stub.StreamObserver<io.zkgate.v1.CampaignResponse> responseObserver) {
      return io.grpc.stub.ClientCalls.asyncBidiStreamingCall(
          getChannel().newCall(getCampaignMethod(), getCallOptions()), responseObserver);
    }

    /**
     * <pre>
     * The current leader replaces its value without a new election.
     * </pre>
     */
    public void proclaim(io.zkgate.v1.ProclaimRequest request,
        io.grpc.stub.StreamObserver<io.zkgate.v1.ProclaimResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getProclaimMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Leave the election from any gateway, by lease.
     * </pre>
     */
    public void resign(io.zkgate.v1.ResignRequest request,
        io.grpc.stub.StreamObserver<io.zkgate.v1.ResignResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getResignMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Who leads now; NOT_FOUND when nobody does.
     * </pre>
     */
    public void leader(io.zkgate.v1.LeaderRequest request,
        io.grpc.stub.StreamObserver<io.zkgate.v1.LeaderResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getLeaderMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * The current state first (leader, or `leader` unset when vacant), then one message per change.
     * </pre>
     */
    public void observe(io.zkgate.v1.ObserveRequest request,
        io.grpc.stub.StreamObserver<io.zkgate.v1.ObserveResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncServerStreamingCall(
          getChannel().newCall(getObserveMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * The queue in order, for operators.
     * </pre>
     */
    public void candidates(io.zkgate.v1.CandidatesRequest request,
        io.grpc.stub.StreamObserver<io.zkgate.v1.CandidatesResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getCandidatesMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Is this fencing token the current leader's?
     * </pre>
     */
    public void validate(io.zkgate.v1.ElectionValidateRequest request,
        io.grpc.stub.StreamObserver<io.zkgate.v1.ElectionValidateResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getValidateMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * One stream for many elections: every election whose name starts with `prefix` (elections
     * that appear later included) plus every name in `elections`. First one `state` per election
     * (`leader` unset when vacant), then `snapshot_complete`, then one `state` per change.
     * </pre>
     */
    public void observeMany(io.zkgate.v1.ObserveManyRequest request,
        io.grpc.stub.StreamObserver<io.zkgate.v1.ObserveManyResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncServerStreamingCall(
          getChannel().newCall(getObserveManyMethod(), getCallOptions()), request, responseObserver);
    }
  }

  /**
   */
  public static final class ElectionBlockingStub extends io.grpc.stub.AbstractBlockingStub<ElectionBlockingStub> {
    private ElectionBlockingStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected ElectionBlockingStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new ElectionBlockingStub(channel, callOptions);
    }

    /**
     * <pre>
     * The current leader replaces its value without a new election.
     * </pre>
     */
    public io.zkgate.v1.ProclaimResponse proclaim(io.zkgate.v1.ProclaimRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getProclaimMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Leave the election from any gateway, by lease.
     * </pre>
     */
    public io.zkgate.v1.ResignResponse resign(io.zkgate.v1.ResignRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getResignMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Who leads now; NOT_FOUND when nobody does.
     * </pre>
     */
    public io.zkgate.v1.LeaderResponse leader(io.zkgate.v1.LeaderRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getLeaderMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * The current state first (leader, or `leader` unset when vacant), then one message per change.
     * </pre>
     */
    public java.util.Iterator<io.zkgate.v1.ObserveResponse> observe(
        io.zkgate.v1.ObserveRequest request) {
      return io.grpc.stub.ClientCalls.blockingServerStreamingCall(
          getChannel(), getObserveMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * The queue in order, for operators.
     * </pre>
     */
    public io.zkgate.v1.CandidatesResponse candidates(io.zkgate.v1.CandidatesRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getCandidatesMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Is this fencing token the current leader's?
     * </pre>
     */
    public io.zkgate.v1.ElectionValidateResponse validate(io.zkgate.v1.ElectionValidateRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getValidateMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * One stream for many elections: every election whose name starts with `prefix` (elections
     * that appear later included) plus every name in `elections`. First one `state` per election
     * (`leader` unset when vacant), then `snapshot_complete`, then one `state` per change.
     * </pre>
     */
    public java.util.Iterator<io.zkgate.v1.ObserveManyResponse> observeMany(
        io.zkgate.v1.ObserveManyRequest request) {
      return io.grpc.stub.ClientCalls.blockingServerStreamingCall(
          getChannel(), getObserveManyMethod(), getCallOptions(), request);
    }
  }

  /**
   */
  public static final class ElectionFutureStub extends io.grpc.stub.AbstractFutureStub<ElectionFutureStub> {
    private ElectionFutureStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected ElectionFutureStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new ElectionFutureStub(channel, callOptions);
    }

    /**
     * <pre>
     * The current leader replaces its value without a new election.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<io.zkgate.v1.ProclaimResponse> proclaim(
        io.zkgate.v1.ProclaimRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getProclaimMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Leave the election from any gateway, by lease.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<io.zkgate.v1.ResignResponse> resign(
        io.zkgate.v1.ResignRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getResignMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Who leads now; NOT_FOUND when nobody does.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<io.zkgate.v1.LeaderResponse> leader(
        io.zkgate.v1.LeaderRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getLeaderMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * The queue in order, for operators.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<io.zkgate.v1.CandidatesResponse> candidates(
        io.zkgate.v1.CandidatesRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getCandidatesMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Is this fencing token the current leader's?
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<io.zkgate.v1.ElectionValidateResponse> validate(
        io.zkgate.v1.ElectionValidateRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getValidateMethod(), getCallOptions()), request);
    }
  }

  private static final int METHODID_PROCLAIM = 0;
  private static final int METHODID_RESIGN = 1;
  private static final int METHODID_LEADER = 2;
  private static final int METHODID_OBSERVE = 3;
  private static final int METHODID_CANDIDATES = 4;
  private static final int METHODID_VALIDATE = 5;
  private static final int METHODID_OBSERVE_MANY = 6;
  private static final int METHODID_CAMPAIGN = 7;

  private static final class MethodHandlers<Req, Resp> implements
      io.grpc.stub.ServerCalls.UnaryMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.ServerStreamingMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.ClientStreamingMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.BidiStreamingMethod<Req, Resp> {
    private final ElectionImplBase serviceImpl;
    private final int methodId;

    MethodHandlers(ElectionImplBase serviceImpl, int methodId) {
      this.serviceImpl = serviceImpl;
      this.methodId = methodId;
    }

    @java.lang.Override
    @java.lang.SuppressWarnings("unchecked")
    public void invoke(Req request, io.grpc.stub.StreamObserver<Resp> responseObserver) {
      switch (methodId) {
        case METHODID_PROCLAIM:
          serviceImpl.proclaim((io.zkgate.v1.ProclaimRequest) request,
              (io.grpc.stub.StreamObserver<io.zkgate.v1.ProclaimResponse>) responseObserver);
          break;
        case METHODID_RESIGN:
          serviceImpl.resign((io.zkgate.v1.ResignRequest) request,
              (io.grpc.stub.StreamObserver<io.zkgate.v1.ResignResponse>) responseObserver);
          break;
        case METHODID_LEADER:
          serviceImpl.leader((io.zkgate.v1.LeaderRequest) request,
              (io.grpc.stub.StreamObserver<io.zkgate.v1.LeaderResponse>) responseObserver);
          break;
        case METHODID_OBSERVE:
          serviceImpl.observe((io.zkgate.v1.ObserveRequest) request,
              (io.grpc.stub.StreamObserver<io.zkgate.v1.ObserveResponse>) responseObserver);
          break;
        case METHODID_CANDIDATES:
          serviceImpl.candidates((io.zkgate.v1.CandidatesRequest) request,
              (io.grpc.stub.StreamObserver<io.zkgate.v1.CandidatesResponse>) responseObserver);
          break;
        case METHODID_VALIDATE:
          serviceImpl.validate((io.zkgate.v1.ElectionValidateRequest) request,
              (io.grpc.stub.StreamObserver<io.zkgate.v1.ElectionValidateResponse>) responseObserver);
          break;
        case METHODID_OBSERVE_MANY:
          serviceImpl.observeMany((io.zkgate.v1.ObserveManyRequest) request,
              (io.grpc.stub.StreamObserver<io.zkgate.v1.ObserveManyResponse>) responseObserver);
          break;
        default:
          throw new AssertionError();
      }
    }

    @java.lang.Override
    @java.lang.SuppressWarnings("unchecked")
    public io.grpc.stub.StreamObserver<Req> invoke(
        io.grpc.stub.StreamObserver<Resp> responseObserver) {
      switch (methodId) {
        case METHODID_CAMPAIGN:
          return (io.grpc.stub.StreamObserver<Req>) serviceImpl.campaign(
              (io.grpc.stub.StreamObserver<io.zkgate.v1.CampaignResponse>) responseObserver);
        default:
          throw new AssertionError();
      }
    }
  }

  private static abstract class ElectionBaseDescriptorSupplier
      implements io.grpc.protobuf.ProtoFileDescriptorSupplier, io.grpc.protobuf.ProtoServiceDescriptorSupplier {
    ElectionBaseDescriptorSupplier() {}

    @java.lang.Override
    public com.google.protobuf.Descriptors.FileDescriptor getFileDescriptor() {
      return io.zkgate.v1.ElectionOuterClass.getDescriptor();
    }

    @java.lang.Override
    public com.google.protobuf.Descriptors.ServiceDescriptor getServiceDescriptor() {
      return getFileDescriptor().findServiceByName("Election");
    }
  }

  private static final class ElectionFileDescriptorSupplier
      extends ElectionBaseDescriptorSupplier {
    ElectionFileDescriptorSupplier() {}
  }

  private static final class ElectionMethodDescriptorSupplier
      extends ElectionBaseDescriptorSupplier
      implements io.grpc.protobuf.ProtoMethodDescriptorSupplier {
    private final String methodName;

    ElectionMethodDescriptorSupplier(String methodName) {
      this.methodName = methodName;
    }

    @java.lang.Override
    public com.google.protobuf.Descriptors.MethodDescriptor getMethodDescriptor() {
      return getServiceDescriptor().findMethodByName(methodName);
    }
  }

  private static volatile io.grpc.ServiceDescriptor serviceDescriptor;

  public static io.grpc.ServiceDescriptor getServiceDescriptor() {
    io.grpc.ServiceDescriptor result = serviceDescriptor;
    if (result == null) {
      synchronized (ElectionGrpc.class) {
        result = serviceDescriptor;
        if (result == null) {
          serviceDescriptor = result = io.grpc.ServiceDescriptor.newBuilder(SERVICE_NAME)
              .setSchemaDescriptor(new ElectionFileDescriptorSupplier())
              .addMethod(getCampaignMethod())
              .addMethod(getProclaimMethod())
              .addMethod(getResignMethod())
              .addMethod(getLeaderMethod())
              .addMethod(getObserveMethod())
              .addMethod(getCandidatesMethod())
              .addMethod(getValidateMethod())
              .addMethod(getObserveManyMethod())
              .build();
        }
      }
    }
    return result;
  }
}
