<#
.SYNOPSIS
  Installs or upgrades csi-proxy as the Windows service `csiproxy` (upstream's name, flags and sc.exe lines),
  with a restart policy, and starts it. Run from an elevated PowerShell on the node.

.DESCRIPTION
  Install: copies csi-proxy.exe and csi-proxyctl.exe to -BinDir, registers the service and starts it.
  Upgrade (the service exists): the service keeps its flags unless -Flags or -LogFile is given. The
  service is stopped, the installed exe is kept as csi-proxy.exe.previous, the new one is put in
  its place and started; if it is not Running within -StartTimeout seconds, the previous exe (and
  flags) are put back and started, and the script fails saying so.
  -Rollback puts csi-proxy.exe.previous back in place and restarts the service, with the flags the
  service has now (a flag only the newer exe knows makes the rollback fail, and be undone).
  Switching over (the service runs an exe from another folder, e.g. upstream's): that exe is left
  where it is, and the service's whole command line is kept in
  -BinDir\csiproxy.previous-command-line.txt. -Rollback with no csi-proxy.exe.previous to go back
  to (or after going back to it) puts that command line back, so the service runs the old exe with
  its old flags again.
  Stopping: a process still running the service's exe after the service reports Stopped (upstream's
  does, holding the pipes and its exe) is given 20 s to exit, then stopped.
  Running any of these twice changes nothing the second time.

.EXAMPLE
  .\install-service.ps1                                   # the exe beside this script's folder
  .\install-service.ps1 -Flags '-v=2 -metrics-bind-address=localhost:8888'
  .\install-service.ps1 -PreshutdownWait 300                # the kubelet's shutdownGracePeriod is 5m
  .\install-service.ps1 -Rollback
  .\install-service.ps1 -Uninstall
#>
param(
    # csi-proxy.exe from the release zip (the zip's root holds it, one level above deploy\windows).
    [string]$Source = (Join-Path $PSScriptRoot '..\..\csi-proxy.exe'),
    # Where the service runs it from: upstream's documented location.
    [string]$BinDir = 'C:\etc\kubernetes\node\bin',
    [string]$LogFile = 'C:\etc\kubernetes\logs\csi-proxy.log',
    # Further flags, e.g. '-kubelet-path=D:\kubelet -working-dir=D:\data -v=2'. On an upgrade, without
    # -Flags or -LogFile the service keeps the flags it has; -Flags '' goes back to the defaults.
    [string]$Flags = '',
    # How long a started service may take to report Running (the daemon does once all 23 pipes exist).
    [int]$StartTimeout = 60,
    # At a node's shutdown, how long (seconds) the service keeps serving while the kubelet service
    # has not stopped (its pods' volumes are unstaged through csi-proxy); at least the kubelet's
    # shutdownGracePeriod. The daemon sets its own preshutdown timeout to this plus 20 s. Passed
    # to the daemon only when given (its default is the same 120 s), so that a -Rollback to an
    # exe that predates the flag keeps a command line it accepts. At most an hour.
    [ValidateRange(0, 3600)]
    [int]$PreshutdownWait = 120,
    [switch]$Rollback,
    [switch]$Uninstall
)
$ErrorActionPreference = 'Stop'
$Name = 'csiproxy'
$exe = Join-Path $BinDir 'csi-proxy.exe'
$previous = "$exe.previous"
# csi-proxyctl.exe, the node's CLI, beside the daemon (the zip holds it beside csi-proxy.exe).
$ctlSource = Join-Path (Split-Path -Parent $Source) 'csi-proxyctl.exe'
$ctl = Join-Path $BinDir 'csi-proxyctl.exe'
# The command line of a service this script took over from an exe in another folder.
$savedCommandLine = Join-Path $BinDir 'csiproxy.previous-command-line.txt'

function Invoke-Sc {
    & sc.exe @args
    if ($LASTEXITCODE -ne 0) { throw "sc.exe $($args -join ' ') failed with exit code $LASTEXITCODE" }
}

# The service's command line (exe and flags), as the service control manager holds it.
function Get-BinPath { (Get-CimInstance -ClassName Win32_Service -Filter "Name='$Name'").PathName }

# The exe of a command line: the first word, quoted or not.
function Get-ExeOf([string]$CommandLine) {
    if ($CommandLine -match '^\s*"([^"]*)"') { return $Matches[1] }
    if ($CommandLine -match '^\s*(\S+)') { return $Matches[1] }
    ''
}

# Processes still running $Path (upstream's exe keeps serving after its service reports Stopped).
function Stop-Leftover([string]$Path) {
    if (-not $Path) { return }
    $deadline = (Get-Date).AddSeconds(20)
    while ($true) {
        $left = @(Get-CimInstance -ClassName Win32_Process | Where-Object { $_.ExecutablePath -and ($_.ExecutablePath -eq $Path) })
        if ($left.Count -eq 0) { return }
        if ((Get-Date) -gt $deadline) { break }
        Start-Sleep -Milliseconds 500
    }
    foreach ($p in $left) {
        Write-Warning "process $($p.ProcessId) still runs $Path after service $Name stopped; stopping it"
        Stop-Process -Id $p.ProcessId -Force -ErrorAction SilentlyContinue
    }
    Start-Sleep -Seconds 1
}

# Copies csi-proxyctl.exe from beside -Source into -BinDir, keeping the one it replaces.
function Copy-Ctl {
    if (-not (Test-Path -PathType Leaf $ctlSource)) {
        Write-Warning "no csi-proxyctl.exe beside $Source; the CLI is not installed"
        return
    }
    if ((Test-Path -PathType Leaf $ctl) -and -not (Test-SameFile $ctlSource $ctl)) {
        Copy-Item -Force -Path $ctl -Destination "$ctl.previous"
    }
    Copy-Item -Force -Path $ctlSource -Destination $ctl
}

function Stop-Csiproxy {
    $running = Get-ExeOf (Get-BinPath)
    if ((Get-Service -Name $Name).Status -ne 'Stopped') {
        # Stopping drains open calls: at most 5 s for connections, 10 s for host calls.
        Stop-Service -Name $Name -NoWait -ErrorAction SilentlyContinue
        $deadline = (Get-Date).AddSeconds(30)
        while ((Get-Service -Name $Name).Status -ne 'Stopped') {
            if ((Get-Date) -gt $deadline) { throw "service $Name did not stop within 30 s; stop its process and run this again" }
            Start-Sleep -Milliseconds 500
        }
    }
    Stop-Leftover $running
}

# $true once the service reports Running; $false if it stops or is still not Running at the timeout.
function Start-Csiproxy {
    try { (Get-Service -Name $Name).Start() }   # returns at once
    catch { Write-Warning "starting service ${Name}: $($_.Exception.GetBaseException().Message)"; return $false }
    $deadline = (Get-Date).AddSeconds($StartTimeout)
    while ((Get-Date) -lt $deadline) {
        Start-Sleep -Milliseconds 500
        $status = (Get-Service -Name $Name).Status
        if ($status -eq 'Running') { return $true }
        if ($status -eq 'Stopped') { return $false }
    }
    $false
}

# Stops the service, puts $From in place of csi-proxy.exe (kept as $KeepAs) and $BinPath as its
# command line, and starts it. If it does not reach Running, puts the kept exe and the old command
# line back, starts that, and fails.
function Update-Csiproxy([string]$From, [string]$KeepAs, [string]$BinPath) {
    $oldBinPath = Get-BinPath
    Stop-Csiproxy
    $kept = $false
    if ($From) {
        if (Test-Path -PathType Leaf $exe) { Copy-Item -Force -Path $exe -Destination $KeepAs; $kept = $true }
        Copy-Item -Force -Path $From -Destination $exe
    }
    if ($BinPath -ne $oldBinPath) { Invoke-Sc config $Name binPath= $BinPath }
    if (Start-Csiproxy) { return }

    Stop-Csiproxy
    if ($From -and $kept) { Copy-Item -Force -Path $KeepAs -Destination $exe }
    if ($BinPath -ne $oldBinPath) { Invoke-Sc config $Name binPath= $oldBinPath }
    $what = if ($From) { $From } else { 'the new flags' }
    $state = if (Start-Csiproxy) { 'it is Running again' } else { 'it did not start either' }
    throw "service $Name did not reach Running within $StartTimeout s with $what; the previous exe and flags were put back and $state. See the daemon's log and the System event log."
}

function Test-SameFile([string]$A, [string]$B) {
    (Test-Path -PathType Leaf $A) -and (Test-Path -PathType Leaf $B) -and (Get-FileHash -LiteralPath $A).Hash -eq (Get-FileHash -LiteralPath $B).Hash
}

$installed = Get-Service -Name $Name -ErrorAction SilentlyContinue

if ($Uninstall) {
    if (-not $installed) { return }
    Stop-Csiproxy
    Invoke-Sc delete $Name
    # The service control manager removes a deleted service once no handle to it is open.
    $deadline = (Get-Date).AddSeconds(30)
    while (Get-Service -Name $Name -ErrorAction SilentlyContinue) {
        if ((Get-Date) -gt $deadline) { throw "service $Name is still registered 30 s after sc.exe delete" }
        Start-Sleep -Milliseconds 500
    }
    return
}

if ($Rollback) {
    if (-not $installed) { throw "service $Name is not installed: nothing to roll back" }
    $havePrevious = (Test-Path -PathType Leaf $previous) -and -not (Test-SameFile $exe $previous)
    if ($havePrevious) {
        $kept = "$exe.rollback"
        Update-Csiproxy -From $previous -KeepAs $kept -BinPath (Get-BinPath)
        Remove-Item -Force $kept
        if (Test-Path -PathType Leaf "$ctl.previous") { Copy-Item -Force -Path "$ctl.previous" -Destination $ctl }
        Write-Host "rolled back: $exe is now $previous"
    } elseif (Test-Path -PathType Leaf $savedCommandLine) {
        # Back to the exe (and flags) the service ran before this script took it over.
        $old = (Get-Content -Raw -LiteralPath $savedCommandLine).Trim()
        $oldExe = Get-ExeOf $old
        if (-not (Test-Path -PathType Leaf $oldExe)) { throw "the service ran $oldExe before, which is no longer there; put it back, then run -Rollback again" }
        if ($old -ne (Get-BinPath)) { Update-Csiproxy -BinPath $old }
        Remove-Item -Force -LiteralPath $savedCommandLine
        Write-Host "rolled back: service $Name runs $old again"
    } elseif (Test-Path -PathType Leaf $previous) {
        Write-Host "$exe is already the previous version"
    } else {
        throw "no $previous and no $savedCommandLine to roll back to (an upgrade by this script leaves the first, taking over a service whose exe is in another folder the second)"
    }
} else {
    if (-not (Test-Path -PathType Leaf $Source)) { throw "no csi-proxy.exe at $Source (pass -Source PATH)" }
    # Upstream's flags and -preshutdown-wait; on an upgrade without -Flags, -LogFile or
    # -PreshutdownWait, the ones the service already has.
    $wait = if ($PSBoundParameters.ContainsKey('PreshutdownWait')) { " -preshutdown-wait=$($PreshutdownWait)s" } else { '' }
    $arguments = "-windows-service -log_file=$LogFile -logtostderr=false$wait $Flags".TrimEnd()
    if ($installed -and -not ($PSBoundParameters.ContainsKey('Flags') -or $PSBoundParameters.ContainsKey('LogFile') -or $PSBoundParameters.ContainsKey('PreshutdownWait'))) {
        # The command line is the exe, quoted or not, then the flags.
        if (-not ((Get-BinPath) -match '^\s*("[^"]*"|\S+)\s*(.*)$')) { throw "cannot read the command line of service $Name" }
        $arguments = $Matches[2].Trim()
    }
    $binPath = "$exe $arguments".TrimEnd()
    New-Item -ItemType Directory -Force -Path $BinDir | Out-Null
    Copy-Ctl

    if (-not $installed) {
        Copy-Item -Force -Path $Source -Destination $exe
        # Upstream's line. The daemon reports Running only once all 23 pipes exist.
        Invoke-Sc create $Name start= auto binPath= $binPath
    } elseif ((Get-ExeOf (Get-BinPath)) -ne $exe) {
        # The service runs an exe from elsewhere (upstream's, in its own folder): keep its whole
        # command line for -Rollback, leave that exe where it is, and switch the service to ours.
        $old = Get-BinPath
        if (-not (Test-Path -PathType Leaf $savedCommandLine)) { Set-Content -LiteralPath $savedCommandLine -Value $old -Encoding UTF8 }
        Write-Host "service $Name ran: $old (kept in $savedCommandLine for -Rollback)"
        Update-Csiproxy -From $Source -KeepAs $previous -BinPath $binPath
    } elseif (-not (Test-Path -PathType Leaf $exe)) {
        Stop-Csiproxy
        Copy-Item -Force -Path $Source -Destination $exe
        Invoke-Sc config $Name binPath= $binPath
    } elseif (Test-SameFile $Source $exe) {
        if ($binPath -ne (Get-BinPath)) { Update-Csiproxy -BinPath $binPath }   # new flags only: no backup
    } else {
        Update-Csiproxy -From $Source -KeepAs $previous -BinPath $binPath
        Write-Host "upgraded: the previous exe is kept as $previous (.\install-service.ps1 -Rollback puts it back)"
    }
    # Restart after 10 s, 10 s, then 60 s; the count of failures resets after a day without one.
    Invoke-Sc failure $Name reset= 86400 actions= restart/10000/restart/10000/restart/60000
    # Also restart when the daemon stops itself with a non-zero exit code (a pipe it cannot create,
    # serving failed): by default the recovery actions only follow a crash.
    Invoke-Sc failureflag $Name 1
}

if ((Get-Service -Name $Name).Status -ne 'Running' -and -not (Start-Csiproxy)) {
    throw "service $Name did not reach Running within $StartTimeout s; see the daemon's log and the System event log"
}
Get-Service -Name $Name
if (Test-Path -PathType Leaf $ctl) { Write-Host "csi-proxyctl: $ctl (for example: & '$ctl' apis)" }
